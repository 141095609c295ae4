"""The spans of a task's life, after OpenTelemetry's semantic conventions
for messaging.

- ``create <task name>`` (kind ``PRODUCER``), recorded by ``schedule()``
  while it prepares the row, in the caller's trace (a request's span, when
  the project traces its requests). Its trace context, in W3C Trace Context
  form, goes into the task's metadata (``traceparent``, and ``tracestate``
  when there is one), which is how it reaches the worker.
- ``process <task name>`` (kind ``CONSUMER``), around each run: the
  middleware and the function, in the worker's thread. It starts a trace
  of its own and links to the creation context: a task runs minutes or
  days after the request that scheduled it, and making it a child would
  stretch the request's trace over that time. A retry is another run, so
  another span; a group of tasks committed together still gives one span
  per task. An exception that fails the run is recorded on its span, with
  the span's status set to ``ERROR``.

Both carry ``messaging.system`` (``django_delayq``),
``messaging.operation.type`` (``create`` or ``process``),
``messaging.operation.name`` (``schedule`` or ``run``),
``messaging.destination.name`` (the queue) and ``messaging.message.id``
(the task's id); a run adds ``delayq.task.attempt`` and
``delayq.task.max_attempts``, and both add ``delayq.task.name``.

The environment variable ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``, if it
names ``django_delayq``, turns all of this off, as it does OpenTelemetry's
own instrumentations.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..payload import MAX_META_BYTES, encoded_size

if TYPE_CHECKING:
    from ..models import DelayedTask

#: The metadata keys that carry a task's creation context.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: ``messaging.system``: not one of the conventions' well-known brokers.
SYSTEM = "django_delayq"
#: The name in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` that turns it off.
INSTRUMENTATION = "django_delayq"


def _enabled() -> bool:
    if importlib.util.find_spec("opentelemetry") is None:
        return False
    try:
        importlib.import_module("opentelemetry.trace")
    except ImportError:  # an opentelemetry namespace without the API
        return False
    disabled = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return INSTRUMENTATION not in {name.strip() for name in disabled.split(",")}


#: Whether tasks are traced in this process: read once, at import.
ENABLED = _enabled()

if ENABLED:
    from opentelemetry import trace
    from opentelemetry.trace import (
        Link,
        NoOpTracer,
        NoOpTracerProvider,
        ProxyTracer,
        ProxyTracerProvider,
        SpanKind,
    )
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    # W3C Trace Context only, whatever the project's global propagator: the
    # metadata stays small (baggage could be any size) and its keys known.
    _propagator = TraceContextTextMapPropagator()
    try:
        _version: str | None = importlib.metadata.version("django-delayq")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        _version = None
    # A proxy until the project sets its provider, then the provider's.
    _tracer = trace.get_tracer(INSTRUMENTATION, _version)
    _SILENT_PROVIDERS = (ProxyTracerProvider, NoOpTracerProvider)

_provider_set = False


def recording() -> bool:
    """Whether a span could be recorded: the project set a tracer provider
    up (the SDK's, or another). Until it does, OpenTelemetry's default
    hands out spans that record nothing, and building them, their context
    and their attributes for every task would be for nothing. A provider,
    once set, stays (OpenTelemetry sets the global one once), so the answer
    is kept from then on."""
    global _provider_set
    if _provider_set:
        return True
    if not isinstance(_tracer, ProxyTracer):  # a tracer given outright
        return not isinstance(_tracer, NoOpTracer)
    if isinstance(trace.get_tracer_provider(), _SILENT_PROVIDERS):
        return False
    _provider_set = True
    return True


def _attributes(
    operation: str, name: str, queue: str, task_id: uuid.UUID | str
) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": "schedule" if operation == "create" else "run",
        "messaging.destination.name": queue,
        "messaging.message.id": str(task_id),
        "delayq.task.name": name,
    }


def created(
    meta: dict[str, Any], *, name: str, queue: str, task_id: uuid.UUID
) -> dict[str, Any]:
    """Record the ``create`` span of a task being scheduled; return its
    metadata with the span's trace context added, or as given when there is
    no context to keep (no SDK set up, or the metadata names a
    ``traceparent`` already, which is kept: the caller carried the context
    from elsewhere).

    The context is left out rather than push the metadata past its limit.
    """
    if not ENABLED or not recording():
        return meta
    span = _tracer.start_span(
        f"create {name}",
        kind=SpanKind.PRODUCER,
        attributes=_attributes("create", name, queue, task_id),
    )
    try:
        if TRACEPARENT in meta or not span.get_span_context().is_valid:
            return meta
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(span))
        stamped = {**meta, **carrier}
        if TRACESTATE in carrier and encoded_size(stamped) > MAX_META_BYTES:
            del stamped[TRACESTATE]
        if encoded_size(stamped) > MAX_META_BYTES:
            return meta
        return stamped
    finally:
        span.end()


def _creation_link(meta: Mapping[str, Any] | None) -> list[Link]:
    if not meta or not isinstance(meta.get(TRACEPARENT), str):
        return []
    carrier = {
        key: value
        for key in (TRACEPARENT, TRACESTATE)
        if isinstance(value := meta.get(key), str)
    }
    context = trace.get_current_span(_propagator.extract(carrier)).get_span_context()
    return [Link(context)] if context.is_valid else []


@contextlib.contextmanager
def processing(row: DelayedTask) -> Iterator[None]:
    """The ``process`` span of a run of ``row``, current while the run's
    middleware and function run; what they raise is recorded on it."""
    if not ENABLED or not recording():
        yield
        return
    attributes = _attributes("process", row.name, row.queue, row.pk)
    attributes["delayq.task.attempt"] = row.attempts
    attributes["delayq.task.max_attempts"] = row.max_attempts
    with _tracer.start_as_current_span(
        f"process {row.name}",
        # A root of its own, not a child of whatever is current (nothing, in
        # a worker; the test's span, under run_due()).
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        kind=SpanKind.CONSUMER,
        links=_creation_link(row.meta),
        attributes=attributes,
    ):
        yield
