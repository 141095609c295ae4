"""What the runner needs from each peer: a producer, and its workers' CLIs."""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

# Read by the peers' worker modules, in the worker processes.
BROKER_URL_ENV = "DELAYQ_PEER_BROKER_URL"
TUNED_ENV = "DELAYQ_PEER_TUNED"
# Which Django peer benchmarks.peers.django_settings installs.
DJANGO_APP_ENV = "DELAYQ_PEER_DJANGO_APP"

# The one polling interval every tuned peer that polls gets, so the tuned
# rows compare like with like: the raw redis-py baseline polls every 10 ms.
TUNED_POLL_S = 0.01


def worker_broker_url() -> str:
    """The measured Redis (or database), as the harness gave it to a worker."""
    try:
        return os.environ[BROKER_URL_ENV]
    except KeyError:
        raise RuntimeError(
            f"{BROKER_URL_ENV} is not set: the peer benchmark's workers are "
            "started by `python -m benchmarks.peers`, which sets it"
        ) from None


def worker_tuned() -> bool:
    return os.environ.get(TUNED_ENV) == "1"


def seconds_until(due: float) -> float:
    """The delay to hand the peer so that the task is due at ``due``."""
    return max(0.0, due - time.time())


class Peer(ABC):
    """One delay queue under test, seen from the client process."""

    name: str = ""
    #: Where the peer keeps its tasks: "redis" (a fresh redis-server, whose
    #: URL is ``broker_url``) or "postgres" (a fresh database, likewise).
    store = "redis"
    #: PostgreSQL peers: the tables that hold their tasks, which the harness
    #: truncates between steps and whose size it measures.
    tables: tuple[str, ...] = ()
    #: Tasks per bulk call, or 0 when the peer has no bulk API with delays.
    bulk_batch = 0
    #: What the bulk call is, for the report.
    bulk_label = "n/a"

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        self.broker_url = broker_url
        self.tuned = tuned

    @abstractmethod
    def version(self) -> str:
        """The peer's package versions."""

    @abstractmethod
    def config(self, workers: int) -> str:
        """The settings in force, in words: defaults, or the knobs turned."""

    @abstractmethod
    def schedule(self, tag: str, index: int, due: float) -> None:
        """Schedule ``record(tag, index, due)`` through the peer's single call."""

    def bulk_schedule(self, tag: str, items: Sequence[tuple[int, float]]) -> None:
        """Schedule many tasks through the peer's bulk API (``bulk_batch`` > 0)."""
        raise NotImplementedError(f"{self.name} has no bulk API with delays")

    @abstractmethod
    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        """(label, argv) of each process that runs the peer's tasks."""

    def worker_env(self) -> dict[str, str]:
        """Environment for the worker processes (beyond URLs and the tuned flag)."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Release the client's connections."""
