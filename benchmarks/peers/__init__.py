"""Delay queues that django-delayq is measured against, on the same Redis.

Celery ``apply_async(countdown=...)``, RQ ``enqueue_in``, Dramatiq
``send_with_options(delay=...)`` and Huey ``schedule(delay=...)``, each with
its default settings and with its obvious knobs turned, workers run as
subprocesses of their own CLIs::

    from benchmarks.peers import PEERS, run_peer

    result = run_peer("rq", n_schedule=2000, light=(25, 10), steady=(1000, 10),
                      burst_n=20000, burst_window_s=2.0, workers=1,
                      idle_seconds=20, memory_n=20000, tuned=False,
                      time_limit_s=30)

``result`` is JSON-serialisable::

    {"peer", "version", "config", "schedule_per_s", "bulk_schedule_per_s",
     "light": {"n", "fired", "p50_ms", "p90_ms", "p99_ms", "max_ms"},
     "steady": {...}, "burst": {..., "completed_per_s"},
     "idle_cmds_per_s", "redis_bytes_per_task", "errors": [...]}

Lateness is start - due in ms, both ``time.time()`` on this one machine;
percentiles are nearest-rank over the tasks that fired. The command line
(``python -m benchmarks.peers --help``) prints a markdown table.

The peers' packages come from the ``bench`` dependency group; nothing here
imports them until a peer is run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PEERS", "run_peer"]

PEERS = ["celery", "rq", "dramatiq", "huey"]


def __getattr__(name: str) -> Any:
    # Worker processes import benchmarks.peers.recorder, hence this package,
    # and RQ's default worker does so in every forked work horse: the
    # runner's imports must not be paid there, so they load on first use.
    if name == "run_peer":
        from benchmarks.peers.runner import run_peer

        return run_peer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
