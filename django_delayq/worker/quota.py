"""How many tasks a worker may still take, for ``--max-tasks``.

A worker recycled after N tasks takes no more than N, also when its threads
take entries in groups: each thread reserves what its next group may hold
and gives back what it did not use.
"""

from __future__ import annotations

import threading


class Quota:
    """Entries a worker may still take: ``limit`` in all (``None``: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._taken = 0  # entries handed to threads, or reserved
        self._lock = threading.Lock()

    def reserve(self, size: int) -> int:
        """Take up to ``size`` of what is left; how much was granted."""
        if self.limit is None:
            return size
        with self._lock:
            granted = max(0, min(size, self.limit - self._taken))
            self._taken += granted
            return granted

    def give_back(self, unused: int) -> None:
        """Return part of a reservation that was not used."""
        if self.limit is not None and unused > 0:
            with self._lock:
                self._taken -= unused
