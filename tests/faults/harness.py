"""The fault scenarios' rig: a private redis-server, the commands as real
processes sharing the test's database, and ways to hurt both.

A :class:`Rig` owns one redis-server (started from the main thread, so it can
be stopped, killed, flushed or rolled back without touching other tests) and
every ``python -m django delayq_*`` process a scenario starts. Processes are
signalled by PID only; at teardown every one still running is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction

from django_delayq import Call, schedule, schedule_many
from django_delayq.conf import get_settings
from django_delayq.models import DelayedTask
from django_delayq.store.keys import ShardKeys, shard_keys
from django_delayq.store.streams import GROUP
from tests.support.helpers import database_env
from tests.testapp.tasks import record
from tools.procs import ROOT, Process, django_command, wait_for
from tools.servers import RedisServer

#: DELAYQ values every scenario uses unless it overrides them: a fault must
#: be noticed and repaired in seconds, not in the production defaults' minutes.
FAULT_DELAYQ: dict[str, Any] = {
    # The commands a scenario starts are no test run: the test process keeps
    # their prefix too (see tests/settings.py).
    "TEST_KEY_PREFIX": "delayq",
    "VISIBILITY_TIMEOUT": 2.0,
    "RETRY_BACKOFF": 0.2,
    "RETRY_BACKOFF_MAX": 1.0,
}
#: Command-line options that make the commands react quickly.
VISIBILITY = "2"
SWEEP_INTERVAL = 1.0
LEASE_TTL = "2"

#: One line per scenario, printed at the end of the session (conftest.py).
SUMMARY: list[str] = []


@dataclass
class Proc:
    """One command process of a scenario."""

    label: str
    command: str
    args: tuple[str, ...]
    process: Process
    #: set when the scenario kills or stops it on purpose
    expected_exit: bool = False
    stopped: bool = False

    @property
    def popen(self) -> subprocess.Popen[str]:
        assert self.process.popen is not None
        return self.process.popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.process.log()

    def tail(self, lines: int = 25) -> str:
        return self.process.tail(lines)


class Rig:
    """A private redis-server plus the django-delayq processes of one scenario."""

    def __init__(self, server: RedisServer, delayq: dict[str, Any], logs: Path) -> None:
        self.redis = server
        self.delayq = delayq
        self.logs = logs
        self.procs: list[Proc] = []
        self._client: redis.Redis | None = None
        db = connection.settings_dict
        pycache = Path(tempfile.gettempdir()) / "delayq-faults-pycache"
        env = {
            key: value
            for key, value in os.environ.items()
            # Without a bytecode cache every command spends over a second
            # compiling Django; the cache goes outside the work tree.
            if key != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(
            DJANGO_SETTINGS_MODULE="tests.faults.settings",
            PYTHONPATH=str(ROOT),
            PYTHONPYCACHEPREFIX=str(pycache),
            DELAYQ_TEST_DB=settings.TEST_DB,
            DELAYQ_TEST_SHARED_DB=str(db["NAME"]),
            DELAYQ_FAULTS_DELAYQ=json.dumps(delayq),
        )
        env.update(database_env(db, settings.TEST_DB))
        self.env = env

    # -- Redis ------------------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        """A raw client for looking at (and hurting) the private Redis."""
        if self._client is None:
            self._client = redis.Redis.from_url(
                self.redis.url, socket_timeout=5, socket_connect_timeout=2
            )
        return self._client

    def shards(self) -> list[ShardKeys]:
        conf = get_settings()
        return [
            shard_keys(conf.key_prefix, queue.name, number)
            for queue in conf.queues.values()
            for number in range(queue.shards)
        ]

    # -- processes ----------------------------------------------------------------

    def start(self, command: str, *args: str, label: str | None = None) -> Proc:
        label = label or f"{command.removeprefix('delayq_')}-{len(self.procs)}"
        process = django_command(
            command,
            *args,
            verbosity=1,
            log_path=self.logs / f"{len(self.procs):02d}-{label}.log",
            env=self.env,
            label=label,
        )
        proc = Proc(label, command, args, process)
        self.procs.append(proc)
        return proc

    def dispatcher(self, *args: str, label: str | None = None) -> Proc:
        return self.start(
            "delayq_dispatch", "--lease-ttl", LEASE_TTL, *args, label=label
        )

    def worker(
        self, *args: str, concurrency: int = 2, label: str | None = None
    ) -> Proc:
        return self.start(
            "delayq_worker",
            "--visibility-timeout",
            VISIBILITY,
            "--concurrency",
            str(concurrency),
            *args,
            label=label,
        )

    def sweeper(
        self, *args: str, interval: float = SWEEP_INTERVAL, label: str | None = None
    ) -> Proc:
        return self.start(
            "delayq_sweep", "--interval", str(interval), *args, label=label
        )

    def in_flight(self) -> dict[int, int]:
        """Pending (read, not yet acknowledged) entries per worker PID."""
        counts: dict[int, int] = {}
        for keys in self.shards():
            try:
                pending = self.client.xpending_range(
                    keys.ready, GROUP, min="-", max="+", count=1000
                )
            except redis.ResponseError:
                continue  # no group yet
            for entry in pending:
                consumer = entry["consumer"].decode()
                pid = int(consumer.split(":")[-2])  # host:pid:token-thread
                counts[pid] = counts.get(pid, 0) + 1
        return counts

    def wait_ready(self, *procs: Proc, seconds: float = 60) -> None:
        """Wait until each process has logged that it serves (or swept once)."""
        markers = {
            "delayq_worker": "thread(s) on",
            "delayq_dispatch": "serving",
            "delayq_sweep": "sweep:",
        }
        for proc in procs:
            marker = markers[proc.command]

            def ready(proc: Proc = proc, marker: str = marker) -> bool:
                if not proc.alive():
                    raise AssertionError(
                        f"{proc.label} exited with {proc.popen.returncode} while "
                        f"starting:\n{proc.tail()}"
                    )
                return marker in proc.log()

            wait_for(ready, seconds, f"{proc.label} ready")

    def kill(self, proc: Proc, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one process by PID, not to its group (the fault
        hits that process alone); for SIGKILL, reap it."""
        proc.expected_exit = True
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.popen.wait(timeout=30)

    def pause(self, proc: Proc) -> None:
        proc.stopped = True
        os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, proc: Proc) -> None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.stopped = False

    def dead_unexpectedly(self) -> list[str]:
        """Processes that exited although the scenario did not stop them."""
        return [
            f"{p.label} (pid {p.pid}) exited with {p.popen.returncode}:\n{p.tail()}"
            for p in self.procs
            if not p.expected_exit and not p.alive()
        ]

    def stop_all(self) -> None:
        """SIGKILL whatever still runs: the scenario is over and checked, and
        a graceful stop would only cost seconds per process."""
        for proc in self.procs:
            proc.process.kill()

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            if self._client is not None:
                self._client.close()
            self.redis.close()


# -- scheduling -----------------------------------------------------------------


class _Rollback(Exception):
    pass


@dataclass
class Batch:
    """Tasks a scenario scheduled: committed ones, and ones rolled back."""

    committed: dict[str, DelayedTask] = field(default_factory=dict)
    rolled_back: set[str] = field(default_factory=set)

    def __iadd__(self, other: Batch) -> Batch:
        self.committed.update(other.committed)
        self.rolled_back |= other.rolled_back
        return self

    @property
    def keys(self) -> set[str]:
        return set(self.committed)


def schedule_records(
    prefix: str,
    count: int,
    *,
    delay: Callable[[int], float] = lambda i: 0.0,
    seconds: float = 0.0,
    rollback_every: int = 10,
) -> Batch:
    """Schedule ``count`` ``record`` tasks, one transaction each.

    Every ``rollback_every``-th call also schedules a task that is rolled
    back: by its whole transaction, or by a savepoint inside a transaction
    that commits (alternately). Those must never run (I2).
    """
    batch = Batch()
    for i in range(count):
        key = f"{prefix}-{i}"
        kwargs = {"seconds": seconds} if seconds else None
        if rollback_every and i % rollback_every == rollback_every - 1:
            doomed = f"{prefix}-rolled-back-{i}"
            batch.rolled_back.add(doomed)
            if (i // rollback_every) % 2:
                with contextlib.suppress(_Rollback), transaction.atomic():
                    schedule(record, args=[doomed], delay=delay(i))
                    raise _Rollback
                batch.committed[key] = schedule(
                    record, args=[key], kwargs=kwargs, delay=delay(i)
                )
            else:
                with transaction.atomic():
                    batch.committed[key] = schedule(
                        record, args=[key], kwargs=kwargs, delay=delay(i)
                    )
                    with contextlib.suppress(_Rollback), transaction.atomic():
                        schedule(record, args=[doomed], delay=delay(i))
                        raise _Rollback
        else:
            batch.committed[key] = schedule(
                record, args=[key], kwargs=kwargs, delay=delay(i)
            )
    return batch


def schedule_bulk(
    prefix: str,
    count: int,
    *,
    delay: Callable[[int], float],
    chunk: int = 1000,
    seconds: float = 0.0,
    queue: str | None = None,
) -> Batch:
    """Schedule many ``record`` tasks through ``schedule_many``, ``chunk`` a
    batch, on ``queue`` (None: the task's); each runs for ``seconds``."""
    batch = Batch()
    kwargs = {"seconds": seconds} if seconds else None
    for start in range(0, count, chunk):
        keys = [f"{prefix}-{i}" for i in range(start, min(start + chunk, count))]
        calls = [
            Call(record, args=[key], kwargs=kwargs, delay=delay(start + n), queue=queue)
            for n, key in enumerate(keys)
        ]
        for key, task in zip(keys, schedule_many(calls), strict=True):
            batch.committed[key] = task
    # One rolled-back bulk batch too.
    doomed = [f"{prefix}-rolled-back-{i}" for i in range(10)]
    with contextlib.suppress(_Rollback), transaction.atomic():
        schedule_many(
            [Call(record, args=[key], delay=delay(0), queue=queue) for key in doomed]
        )
        raise _Rollback
    batch.rolled_back.update(doomed)
    return batch


def sweep_count(sweeper: Proc, what: str) -> int:
    """How many tasks a sweeper's passes ``what`` ("reindexed"...) in all,
    from its log."""
    return sum(map(int, re.findall(rf"\b{what} (\d+)", sweeper.log())))


def sweep_totals(sweeper: Proc) -> str:
    """What a sweeper's passes repaired in total, from its log."""
    totals = {
        what: sweep_count(sweeper, what)
        for what in ("replayed", "reindexed", "removed", "corrected", "recovered")
    }
    return "sweeper " + ", ".join(f"{what} {n}" for what, n in totals.items())


def grep(procs: Iterable[Proc], text: str) -> list[str]:
    """Lines of the processes' logs that contain ``text``."""
    return [line for p in procs for line in p.log().splitlines() if text in line]


# -- Redis losing everything ------------------------------------------------------


def flush_all(rig: Rig) -> None:
    rig.client.flushall()


def restart_empty(rig: Rig) -> None:
    rig.redis.kill()
    time.sleep(0.5)
    rig.redis.start()


#: The two ways a scenario makes Redis lose everything, for parametrize.
REDIS_LOSSES = [
    ("FLUSHALL", flush_all),
    ("redis killed, restarted empty", restart_empty),
]
