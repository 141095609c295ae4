"""The Prometheus rules file (docs/prometheus/django-delayq-rules.yml) is a
valid rules file, alerts only on metrics django-delayq exports, and holds
exactly the expressions of docs/guide/metrics.md's "What to alert on"; the
Kubernetes guide's manifests parse, and agree on the metrics port."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.docs.test_metrics_names import exported, sample_names
from tests.support.docs_text import DOCS, fences

RULES = DOCS / "prometheus" / "django-delayq-rules.yml"
GUIDE = DOCS / "guide" / "metrics.md"
KUBERNETES = DOCS / "howto" / "kubernetes.md"

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def normalized(expr: str) -> str:
    """An expression with its whitespace runs made one space."""
    return " ".join(expr.split())


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def guide_alert_expressions(text: str) -> list[str]:
    """The expressions of the guide's "What to alert on" section: one per
    line of its ``text`` blocks, an indented line continuing the one above."""
    section = text.split("\n## What to alert on\n", 1)[1].split("\n## ", 1)[0]
    found: list[str] = []
    for block in re.findall(r"^```text\n(.*?)^```$", section, re.M | re.S):
        for line in block.splitlines():
            if not line.strip():
                continue
            if line[0].isspace() and found:
                found[-1] += " " + line.strip()
            else:
                found.append(line.strip())
    return [normalized(expr) for expr in found]


def test_the_file_is_a_rules_file_of_alerts():
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names = set()
    for group in document["groups"]:
        assert set(group) == {"name", "rules"}
        assert group["name"] not in names
        names.add(group["name"])
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
    alerts = [rule["alert"] for rule in rules()]
    assert len(alerts) == len(set(alerts)), "an alert name is used twice"
    assert len(alerts) >= 10


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule["alert"])
def test_every_alert_has_an_expression_a_duration_and_a_summary(rule):
    assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"])
    assert isinstance(rule["expr"], str)
    assert rule["expr"].strip()
    assert _DURATION.match(str(rule["for"])), rule["for"]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"].strip()
    assert rule["annotations"]["description"].strip()
    assert rule["expr"].count("(") == rule["expr"].count(")")


def test_every_metric_an_alert_uses_is_exported():
    known = sample_names()
    used = {
        name for rule in rules() for name in re.findall(r"\bdelayq_\w+", rule["expr"])
    }
    assert used, "no metric found in the rules"
    assert used - known == set()
    # Each label a rule aggregates by is a label of a metric it reads.
    for rule in rules():
        for labels in re.findall(r"\bby \(([^)]*)\)", rule["expr"]):
            for label in (name.strip() for name in labels.split(",")):
                assert label in {"queue", "le", "limit", "store", "kind"}, label


def test_the_rules_are_the_guides_alerts_and_no_others():
    in_guide = guide_alert_expressions(GUIDE.read_text())
    in_file = [normalized(rule["expr"]) for rule in rules()]
    assert len(in_guide) >= 10
    assert set(in_guide) - set(in_file) == set(), "alerts of the guide not in the file"
    assert set(in_file) - set(in_guide) == set(), "rules the guide does not show"
    assert len(in_file) == len(set(in_file))


def test_a_changed_expression_in_the_guide_is_caught():
    text = GUIDE.read_text().replace(
        "max by (queue) (delayq_workers) == 0", "max by (queue) (delayq_workers) < 1"
    )
    in_file = {normalized(rule["expr"]) for rule in rules()}
    assert set(guide_alert_expressions(text)) - in_file == {
        "max by (queue) (delayq_workers) < 1"
    }


def test_the_guide_names_the_file():
    section = GUIDE.read_text().split("\n## What to alert on\n", 1)[1]
    assert f"docs/prometheus/{RULES.name}" in section.split("\n## ", 1)[0]
    assert exported()  # the metrics the rules were checked against


# -- the Kubernetes guide ------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    documents = []
    for fence in fences(KUBERNETES):
        if fence.language == "yaml":
            documents += [d for d in yaml.safe_load_all(fence.body) if d]
    return documents


def metrics_port(container: dict[str, Any]) -> int:
    args = [*container["command"], *container.get("args", [])]
    assert "--metrics-port" in args, container["name"]
    assert args[args.index("--metrics-addr") + 1] == "0.0.0.0", container["name"]
    return int(args[args.index("--metrics-port") + 1])


def test_every_yaml_block_of_the_kubernetes_guide_parses():
    kinds = [document["kind"] for document in manifests()]
    assert kinds.count("Deployment") == 3
    assert {"Job", "Secret", "Service", "ServiceMonitor", "NetworkPolicy"} <= set(kinds)


def test_every_deployment_serves_its_metrics_where_it_is_scraped():
    documents = manifests()
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    ports = set()
    for deployment in deployments:
        template = deployment["spec"]["template"]
        assert (
            deployment["spec"]["selector"]["matchLabels"].items()
            <= template["metadata"]["labels"].items()
        )
        (container,) = template["spec"]["containers"]
        port = metrics_port(container)
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named == {"metrics": port}
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port)
        assert annotations["prometheus.io/path"] == "/metrics"
        ports.add(port)
    assert len(ports) == 1

    (service,) = [d for d in documents if d["kind"] == "Service"]
    (monitor,) = [d for d in documents if d["kind"] == "ServiceMonitor"]
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    for deployment in deployments:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port == {
        "name": "metrics",
        "port": ports.pop(),
        "targetPort": "metrics",
    }
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert [p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]] == [
        "metrics"
    ]
