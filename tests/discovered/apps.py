from __future__ import annotations

from django.apps import AppConfig


class DiscoveredConfig(AppConfig):
    """An app whose tasks module nothing imports: found by autodiscovery."""

    name = "tests.discovered"
    label = "discovered"
