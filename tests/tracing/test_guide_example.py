"""The console-exporter block of docs/guide/opentelemetry.md, run as the
guide says, in a process of its own (it sets the global tracer provider,
which a process sets once): a task scheduled under a request's span, then
run, prints a create span in the request's trace and a process span
linked to it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.acceptance.processes import Processes
from tools.procs import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

GUIDE = ROOT / "docs" / "guide" / "opentelemetry.md"


def guide_block(name: str) -> str:
    match = re.search(
        rf"^```\{{code-block\}} python\n:name: {name}\n\n(?P<code>.*?)^```$",
        GUIDE.read_text(),
        re.MULTILINE | re.DOTALL,
    )
    assert match, f"no block named {name} in {GUIDE.name}"
    return match["code"]


SCRIPT = """
import django

django.setup()

{block}

from django_delayq import schedule
from django_delayq.testing import run_due, test_mode
from tests.testapp.tasks import add

with test_mode("manual"):
    with trace.get_tracer("shop").start_as_current_span("POST /checkout"):
        schedule(add, args=[2, 3])
    [ran] = run_due()
    assert ran.outcome == "succeeded"
"""


def printed_spans(output: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter printed, one after the other."""
    decoder, spans, position = json.JSONDecoder(), [], 0
    while (start := output.find("{", position)) != -1:
        span, position = decoder.raw_decode(output, start)
        spans.append(span)
    return spans


def test_the_console_exporter_block_prints_linked_spans(processes: Processes) -> None:
    script = SCRIPT.format(block=textwrap.dedent(guide_block("otel-console")))
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=processes.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spans = {span["name"]: span for span in printed_spans(done.stdout)}
    request = spans["POST /checkout"]
    created = spans["create tests.testapp.tasks.add"]
    processed = spans["process tests.testapp.tasks.add"]
    assert created["kind"] == "SpanKind.PRODUCER"
    assert created["parent_id"] == request["context"]["span_id"]
    assert created["context"]["trace_id"] == request["context"]["trace_id"]
    assert processed["kind"] == "SpanKind.CONSUMER"
    assert processed["parent_id"] is None
    assert processed["context"]["trace_id"] != request["context"]["trace_id"]
    [link] = processed["links"]
    assert link["context"]["span_id"] == created["context"]["span_id"]
    assert processed["attributes"]["messaging.operation.type"] == "process"
