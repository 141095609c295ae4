"""Reading a /metrics page as Prometheus would: sample name + labels -> value."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int, addr: str = "127.0.0.1") -> Samples:
    with urllib.request.urlopen(f"http://{addr}:{port}/metrics", timeout=10) as page:
        return parse(page.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
