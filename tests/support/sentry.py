"""Sentry's real SDK, with transports that keep what it would send.

:class:`Recording` keeps the envelopes in a list, for the tests that run
tasks in their own process; :class:`ToFile` appends each envelope item as a
JSON line to a file, for a worker process the test starts (the settings
install it when ``DELAYQ_TEST_SENTRY`` names the file).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

#: Any DSN: the transports send nothing anywhere.
DSN = "https://public@sentry.invalid/1"


class Recording(Transport):
    """Keeps every envelope the client sends."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def items(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of the items of ``kind`` ("event", "check_in")."""
        return [
            item.payload.json
            for envelope in self.envelopes
            for item in envelope.items
            if item.type == kind and item.payload.json is not None
        ]


class ToFile(Transport):
    """Appends ``{"type": ..., "payload": ...}`` per envelope item to a file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._lock = threading.Lock()

    def capture_envelope(self, envelope: Envelope) -> None:
        lines = [
            json.dumps({"type": item.type, "payload": item.payload.json}) + "\n"
            for item in envelope.items
            if item.payload.json is not None
        ]
        with self._lock, self.path.open("a") as file:
            file.writelines(lines)


#: The tests' fixture: initialise Sentry with these integrations and
#: ``sentry_sdk.init()`` options; returns the transport.
Init = Callable[..., Recording]


def read_items(path: Path, kind: str) -> list[dict[str, Any]]:
    """The payloads of ``kind`` that :class:`ToFile` wrote to ``path``."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if item["type"] == kind:
            found.append(item["payload"])
    return found
