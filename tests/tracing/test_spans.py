"""OpenTelemetry spans of a task's life, in one process: the ``create`` span
of ``schedule()``, in the caller's trace, whose context the row keeps; the
``process`` span of each run (the worker's path, through the testing
toolkit's ``run_due()``), a trace of its own linked to that context; and
what happens without a tracer that records. A real worker process, whose
group commit still gives a span per task, is in test_worker_process.py.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Tracer, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from django_delayq import Call, schedule, schedule_many
from django_delayq.models import DelayedTask
from django_delayq.payload import MAX_META_BYTES
from django_delayq.testing import run_due, test_mode
from django_delayq.tracing import spans as tracing_spans
from tests.support.otel import tracer_provider
from tests.testapp.tasks import add, always_fails
from tools.procs import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The SDK's tracer for django-delayq's spans, exporting in memory."""
    provider, memory = tracer_provider()
    monkeypatch.setattr(tracing_spans, "_tracer", provider.get_tracer("django_delayq"))
    with test_mode("manual"):
        yield memory
    provider.shutdown()


@pytest.fixture
def request_tracer() -> Tracer:
    """The project's own tracer, for the request that schedules."""
    provider, _ = tracer_provider()
    return provider.get_tracer("shop")


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [
        span for span in exporter.get_finished_spans() if span.name.startswith(prefix)
    ]


def traceparent(span: Any) -> str:
    context = span.get_span_context()
    return (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def test_schedule_records_a_create_span_in_the_callers_trace(
    exporter: InMemorySpanExporter, request_tracer: Tracer
) -> None:
    with request_tracer.start_as_current_span("POST /checkout") as request:
        task = schedule(add, args=[1, 2], queue="orders")
    [created] = named(exporter, "create ")
    assert created.name == f"create {add.name}"
    assert created.kind == SpanKind.PRODUCER
    assert created.parent is not None
    assert created.parent.span_id == request.get_span_context().span_id
    assert created.context.trace_id == request.get_span_context().trace_id
    assert dict(created.attributes or {}) == {
        "messaging.system": "django_delayq",
        "messaging.operation.type": "create",
        "messaging.operation.name": "schedule",
        "messaging.destination.name": "orders",
        "messaging.message.id": str(task.pk),
        "delayq.task.name": add.name,
    }
    # The row keeps the creation context, for the worker.
    row = DelayedTask.objects.get(pk=task.pk)
    assert row.meta == {"traceparent": traceparent(created)}


def test_each_run_is_a_span_of_its_own_linked_to_the_creation_context(
    exporter: InMemorySpanExporter, request_tracer: Tracer
) -> None:
    with request_tracer.start_as_current_span("POST /checkout") as request:
        task = schedule(add, args=[2, 3], meta={"tenant": "acme"})
    [created] = named(exporter, "create ")
    [ran] = run_due()
    assert ran.outcome == "succeeded"
    [processed] = named(exporter, "process ")
    assert processed.name == f"process {add.name}"
    assert processed.kind == SpanKind.CONSUMER
    # A trace of its own (the run may come days later), linked to the
    # request's through the creation context.
    assert processed.parent is None
    assert processed.context.trace_id != request.get_span_context().trace_id
    [link] = processed.links
    assert (link.context.trace_id, link.context.span_id) == (
        created.context.trace_id,
        created.context.span_id,
    )
    attributes = dict(processed.attributes or {})
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.message.id"] == str(task.pk)
    assert attributes["messaging.destination.name"] == "default"
    assert (
        attributes["delayq.task.attempt"],
        attributes["delayq.task.max_attempts"],
    ) == (1, 3)
    assert processed.status.status_code == StatusCode.UNSET


def test_a_failed_run_records_its_error_and_each_retry_is_another_span(
    exporter: InMemorySpanExporter,
) -> None:
    task = schedule(always_fails, args=["card declined"], max_attempts=2)
    later = timezone.now() + datetime.timedelta(hours=1)
    outcomes = [ran.outcome for ran in run_due(until=later)]
    assert outcomes == ["retrying", "failed"]
    runs = named(exporter, "process ")
    assert [dict(span.attributes or {})["delayq.task.attempt"] for span in runs] == [
        1,
        2,
    ]
    assert len({span.context.span_id for span in runs}) == 2
    for span in runs:
        assert span.status.status_code == StatusCode.ERROR
        [event] = span.events
        assert event.name == "exception"
        assert dict(event.attributes or {})["exception.message"] == "card declined"
        assert dict(span.attributes or {})["messaging.message.id"] == str(task.pk)


def test_a_batch_gives_each_task_its_create_span_and_context(
    exporter: InMemorySpanExporter,
) -> None:
    tasks = schedule_many([Call(add, args=[n, n]) for n in range(3)])
    created = named(exporter, "create ")
    by_id = {
        dict(span.attributes or {})["messaging.message.id"]: span for span in created
    }
    assert set(by_id) == {str(task.pk) for task in tasks}
    for task in tasks:
        row = DelayedTask.objects.get(pk=task.pk)
        assert row.meta == {"traceparent": traceparent(by_id[str(task.pk)])}


def test_a_traceparent_given_in_the_metadata_is_kept(
    exporter: InMemorySpanExporter,
) -> None:
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    task = schedule(add, args=[1, 1], meta={"traceparent": upstream})
    assert DelayedTask.objects.get(pk=task.pk).meta == {"traceparent": upstream}
    run_due()
    [processed] = named(exporter, "process ")
    [link] = processed.links
    assert f"{link.context.span_id:016x}" == "b7ad6b7169203331"


def test_the_context_is_left_out_rather_than_pass_the_metadata_limit(
    exporter: InMemorySpanExporter,
) -> None:
    # Just under the limit: the context would not fit.
    filler = "x" * (MAX_META_BYTES - len('{"note": ""}') - 2)
    task = schedule(add, args=[1, 1], meta={"note": filler})
    assert DelayedTask.objects.get(pk=task.pk).meta == {"note": filler}
    assert len(named(exporter, "create ")) == 1  # the span is still recorded


def test_nothing_is_kept_without_a_tracer_that_records() -> None:
    # The global provider is OpenTelemetry's default, which records nothing:
    # no context, and the metadata stays as given.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    with test_mode("manual"):
        plain = schedule(add, args=[1, 1])
        tagged = schedule(add, args=[1, 1], meta={"tenant": "acme"})
        assert [ran.outcome for ran in run_due()] == ["succeeded", "succeeded"]
    assert DelayedTask.objects.get(pk=plain.pk).meta is None
    assert DelayedTask.objects.get(pk=tagged.pk).meta == {"tenant": "acme"}


@pytest.mark.parametrize(
    ("disabled", "enabled"),
    [("", True), ("flask, django_delayq", False), ("django", True)],
)
def test_otel_python_disabled_instrumentations_turns_it_off(
    disabled: str, enabled: bool
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from django_delayq.tracing import ENABLED; "
            "print(json.dumps(ENABLED))",
        ],
        env={**os.environ, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) is enabled
