"""OpenTelemetry's real SDK, with exporters that keep the spans.

The tests of a process's own spans give :mod:`django_delayq.tracing` a
tracer of a provider of their own (:func:`tracer_provider`), exporting to
the SDK's in-memory exporter: setting the global provider would make every
later test's tasks carry a trace context. A worker process a test starts
sets the global provider in its settings when ``DELAYQ_TEST_OTEL`` names a
file, and :class:`ToFile` appends each span to it as a JSON line
(:func:`span_record`), which :func:`read_spans` reads back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


def tracer_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What a test asserts of a span, as JSON."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None
        if span.parent is None
        else f"{span.parent.span_id:016x}",
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
            }
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


class ToFile(SpanExporter):
    """Appends each finished span to ``path``, a JSON line each."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        with self._lock, open(self.path, "a") as file:
            file.write(lines)
        return SpanExportResult.SUCCESS


def read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]
