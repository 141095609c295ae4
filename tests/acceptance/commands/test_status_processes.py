"""``manage.py delayq_status`` as a probe runs it: a process of its own, judging
real dispatcher, worker and sweeper processes that are killed, and a Redis
stopped.

Exit status 0 healthy, 1 degraded, 2 down.
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import OutboxEntry
from tests.acceptance.processes import ROOT, Processes
from tests.testapp.tasks import add
from tools.procs import NotReached, wait_for
from tools.servers import RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

#: Short, so that a killed process's lease or heartbeat lapses in seconds.
LEASE_TTL = "2"
VISIBILITY_TIMEOUT = "3"
SWEEP_INTERVAL = "1"


@pytest.fixture(autouse=True)
def _empty_redis(redis_client) -> None:
    """Start from an empty Redis: a worker another test killed keeps its
    heartbeat until its visibility timeout, and would count as alive here."""


def probe(processes: Processes) -> tuple[int, str]:
    """Run ``delayq_status`` as a probe would: its exit status and report."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "delayq_status"],
        env=processes.env,
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout.decode() + done.stderr.decode()


def start_loops(processes: Processes) -> tuple[subprocess.Popen[str], ...]:
    """A dispatcher and a worker, up (the sweeper alone missing)."""
    dispatcher = processes.start("delayq_dispatch", "--lease-ttl", LEASE_TTL)
    worker = processes.start(
        "delayq_worker", "--visibility-timeout", VISIBILITY_TIMEOUT
    )
    wait_for(
        lambda: _problems(probe(processes)[1]) == ["no sweeper"],
        45,
        "the dispatcher and the worker up",
    )
    return dispatcher, worker


def _problems(text: str) -> list[str]:
    """The kinds of problem the report names (one line each per queue or
    shard: a kind is listed once)."""
    kinds = {
        "no sweeper": "no sweeper",
        "no dispatcher leases": "no dispatcher",
        "no live worker": "no worker",
        "outbox entr": "outbox",
    }
    found = []
    for line in text.splitlines():
        if line.startswith("  - "):
            found += [kind for words, kind in kinds.items() if words in line]
    return sorted(set(found))


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def until_reported(processes: Processes, problems: list[str]) -> str:
    """The degraded report, once it names exactly ``problems`` (a killed
    process's heartbeat or lease lapses first)."""
    seen = [""]

    def reported() -> bool:
        seen[0] = probe(processes)[1]
        return _problems(seen[0]) == sorted(problems)

    try:
        wait_for(reported, 30, f"degraded with {problems}")
    except NotReached as exc:
        raise AssertionError(f"{exc}; the last report:\n{seen[0]}") from exc
    code, text = probe(processes)
    assert code == 1
    assert text.startswith("django-delayq: degraded\n")
    return text


@pytest.mark.timeout(240)  # five failures in turn, each waited for
def test_the_status_follows_processes_as_they_fail_one_by_one(
    processes: Processes,
) -> None:
    """One set of processes, failing one at a time, each failure reported
    on its own and named (exit status 1, degraded), as a probe meets them
    over a bad night."""
    dispatcher, worker = start_loops(processes)

    # Outbox entries nothing replays (no sweeper runs).
    late = timezone.now() - datetime.timedelta(minutes=5)
    task = schedule(add, args=[1, 2], delay=3600)
    entry = OutboxEntry.objects.create(
        task_id=task.pk,
        queue=task.queue,
        shard=task.shard,
        action=OutboxEntry.Action.SCHEDULE,
        created_at=late,
    )
    text = until_reported(processes, ["no sweeper", "outbox"])
    assert "1 outbox entry older than 60 s" in text
    entry.delete()

    # With a sweeper, all is well; its last pass lapses after a few of its
    # intervals (10 s at the least) once it is killed.
    sweeper = processes.start("delayq_sweep", "--interval", SWEEP_INTERVAL)
    wait_for(lambda: probe(processes)[0] == 0, 45, "healthy with the sweeper")
    code, text = probe(processes)
    assert code == 0
    (line,) = [line for line in text.splitlines() if line.startswith("Sweeper ")]
    assert line.split(": ", 1)[1].startswith("every 1 s, last pass ended at ")
    kill(sweeper)
    text = until_reported(processes, ["no sweeper"])
    assert (
        "no sweeper has ended a pass within 3 of its intervals: nothing replays "
        "the outbox or repairs Redis after a data loss (run delayq_sweep)"
    ) in text
    assert "Sweeper " not in text

    # A killed worker: its heartbeat lapses after the visibility timeout.
    kill(worker)
    text = until_reported(processes, ["no sweeper", "no worker"])
    assert "no live worker serves queue 'default' (is delayq_worker running?)" in text

    # A killed dispatcher: its leases lapse after --lease-ttl; nobody takes
    # the shards over.
    kill(dispatcher)
    text = until_reported(processes, ["no sweeper", "no worker", "no dispatcher"])
    assert "no dispatcher leases shard default:0 (is delayq_dispatch running?)" in text


def test_redis_stopped_makes_the_status_down(
    tmp_path: Path, processes: Processes
) -> None:
    server = RedisServer()
    server.start()
    try:
        own = Processes({**processes.env, "DELAYQ_REDIS_URL": server.url}, tmp_path)
        try:
            start_loops(own)
            server.stop()
            code, text = probe(own)
            assert code == 2
            assert text.startswith("django-delayq: down\n")
            assert "Redis does not answer (ConnectionError" in text
        finally:
            own.stop_all()
    finally:
        server.stop()
