"""OpenTelemetry across processes: tasks scheduled in this process, under a
request's span, run by a real worker process whose settings set up the SDK
(its spans written to a file). Each run is a ``process`` span linked to the
``create`` span of its task, a span per task though the worker commits them
as a group, and the failed one carries its error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import transaction
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.tracing import spans as tracing_spans
from tests.acceptance.processes import Processes
from tests.support.otel import read_spans, tracer_provider
from tests.testapp.tasks import always_fails, record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    provider, memory = tracer_provider()
    monkeypatch.setattr(tracing_spans, "_tracer", provider.get_tracer("django_delayq"))
    yield memory
    provider.shutdown()


def test_a_workers_runs_link_to_the_request_that_scheduled_them(
    processes: Processes, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    written = tmp_path / "spans.jsonl"
    processes.env["DELAYQ_TEST_OTEL"] = str(written)
    provider, _ = tracer_provider()
    request = provider.get_tracer("shop").start_as_current_span("POST /checkout")
    with request, transaction.atomic():
        fine = [schedule(record, args=[f"traced-{n}"]) for n in range(5)]
        failing = schedule(always_fails, args=["card declined"], max_attempts=1)
    tasks = [*fine, failing]
    created = {
        span.attributes["messaging.message.id"]: span
        for span in exporter.get_finished_spans()
        if span.attributes is not None
    }
    assert set(created) == {str(task.pk) for task in tasks}

    processes.start("delayq_dispatch")
    processes.start("delayq_worker", "--concurrency", "1")

    def settled() -> bool:
        rows = DelayedTask.objects.filter(pk__in=[task.pk for task in tasks])
        return sorted(row.status for row in rows) == sorted(
            [Status.SUCCEEDED] * 5 + [Status.FAILED]
        )

    wait_for(settled, 120, "five tasks succeeded and one failed")

    def runs() -> list[dict]:
        return [span for span in read_spans(written) if span["kind"] == "CONSUMER"]

    wait_for(lambda: len(runs()) == 6, 60, "six process spans exported")
    by_id = {span["attributes"]["messaging.message.id"]: span for span in runs()}
    assert set(by_id) == set(created)
    for task_id, span in by_id.items():
        origin = created[task_id].get_span_context()
        assert span["links"] == [
            {"trace_id": f"{origin.trace_id:032x}", "span_id": f"{origin.span_id:016x}"}
        ]
        assert span["parent_span_id"] is None
        assert span["trace_id"] != f"{origin.trace_id:032x}"
    assert len({span["span_id"] for span in by_id.values()}) == 6
    failed = by_id[str(failing.pk)]
    assert (failed["name"], failed["status"], failed["events"]) == (
        f"process {always_fails.name}",
        "ERROR",
        ["exception"],
    )
    assert {by_id[str(task.pk)]["status"] for task in fine} == {"UNSET"}
