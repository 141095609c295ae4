"""The names the docs and the Grafana dashboard use are the names exported."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from django_delayq import metrics
from django_delayq.metrics.collector import BacklogCollector

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "django-delayq.json"
GUIDE = DOCS / "guide" / "metrics.md"
COMMANDS = DOCS.parent / "django_delayq" / "management" / "commands"

_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


def exported() -> dict[str, str]:
    """Every metric family of django-delayq, name -> type."""
    counters = vars(metrics.enable()).values()
    families = [
        *(
            f
            for c in counters
            if isinstance(c, MetricWrapperBase)
            for f in c.describe()
        ),
        *BacklogCollector().describe(),
    ]
    return {f.name: f.type for f in families if f.name.startswith("delayq_")}


def sample_names() -> set[str]:
    return {
        name + suffix for name, kind in exported().items() for suffix in _SUFFIXES[kind]
    }


def expressions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for value in node.values() for e in expressions(value)]
    if isinstance(node, list):
        return [e for value in node for e in expressions(value)]
    return []


def test_every_dashboard_expression_uses_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = expressions(dashboard)
    assert len(exprs) >= 20
    known = sample_names()
    used = {name for expr in exprs for name in re.findall(r"\bdelayq_\w+", expr)}
    assert used - known == set()
    # And the dashboard shows every family, histograms through their buckets.
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    assert set(exported()) - shown == set()
    assert "delayq_due_backlog" in dashboard["templating"]["list"][1]["definition"]


def test_the_guide_lists_every_metric_with_its_type() -> None:
    rows = dict(re.findall(r"^\| `(delayq_\w+)` \| (\w+) \|", GUIDE.read_text(), re.M))
    expected = {
        name + ("_total" if kind == "counter" else ""): kind
        for name, kind in exported().items()
    }
    assert rows == expected
    # Every PromQL example of the guide names exported metrics only.
    commands = {path.stem for path in COMMANDS.glob("delayq_*.py")}
    used = set(re.findall(r"\bdelayq_\w+", GUIDE.read_text())) - commands
    assert used <= sample_names() | set(expected)
