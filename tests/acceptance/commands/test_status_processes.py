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
from tools.procs import wait_for
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


def start_loops(
    processes: Processes, *, sweep: bool = True
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    dispatcher = processes.start("delayq_dispatch", "--lease-ttl", LEASE_TTL)
    worker = processes.start(
        "delayq_worker", "--visibility-timeout", VISIBILITY_TIMEOUT
    )
    if sweep:
        processes.start("delayq_sweep", "--interval", SWEEP_INTERVAL)
        wait_for(lambda: probe(processes)[0] == 0, 45, "healthy with all running")
    else:
        wait_for(
            lambda: _only_the_sweeper_missing(probe(processes)[1]),
            45,
            "the dispatcher and the worker up",
        )
    return dispatcher, worker


def _only_the_sweeper_missing(text: str) -> bool:
    problems = [line for line in text.splitlines() if line.startswith("  - ")]
    return len(problems) == 1 and "no sweeper" in problems[0]


def kill_until_degraded(processes: Processes, process: subprocess.Popen[bytes]) -> str:
    """SIGKILL ``process``; once its heartbeat lapsed, the degraded report."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    wait_for(lambda: probe(processes)[0] == 1, 30, "degraded")
    code, text = probe(processes)
    assert code == 1
    assert text.startswith("django-delayq: degraded\n")
    return text


def test_a_killed_dispatcher_makes_the_status_degraded(processes: Processes) -> None:
    dispatcher, _ = start_loops(processes)
    # Its leases lapse after --lease-ttl; nobody takes the shards over.
    text = kill_until_degraded(processes, dispatcher)
    assert "no dispatcher leases shard default:0 (is delayq_dispatch running?)" in text
    assert "no live worker" not in text


def test_a_killed_worker_makes_the_status_degraded(processes: Processes) -> None:
    _, worker = start_loops(processes)
    # Its heartbeat lapses after the visibility timeout.
    text = kill_until_degraded(processes, worker)
    assert "no live worker serves queue 'default' (is delayq_worker running?)" in text
    assert "no dispatcher leases" not in text


def test_a_killed_sweeper_makes_the_status_degraded(processes: Processes) -> None:
    start_loops(processes, sweep=False)
    sweeper = processes.start("delayq_sweep", "--interval", SWEEP_INTERVAL)
    wait_for(lambda: probe(processes)[0] == 0, 45, "healthy with the sweeper")
    code, text = probe(processes)
    assert code == 0
    (line,) = [line for line in text.splitlines() if line.startswith("Sweeper ")]
    assert line.split(": ", 1)[1].startswith("every 1 s, last pass ended at ")
    # Its last pass lapses after a few intervals (10 s at the least).
    text = kill_until_degraded(processes, sweeper)
    assert (
        "no sweeper has ended a pass within 3 of its intervals: nothing replays "
        "the outbox or repairs Redis after a data loss (run delayq_sweep)"
    ) in text
    assert "Sweeper " not in text
    assert "no dispatcher leases" not in text
    assert "no live worker" not in text


def test_outbox_entries_left_unreplayed_make_the_status_degraded(
    processes: Processes,
) -> None:
    start_loops(processes, sweep=False)  # a sweeper would replay the entry
    late = timezone.now() - datetime.timedelta(minutes=5)
    task = schedule(add, args=[1, 2], delay=3600)
    OutboxEntry.objects.create(
        task_id=task.pk,
        queue=task.queue,
        shard=task.shard,
        action=OutboxEntry.Action.SCHEDULE,
        created_at=late,
    )
    code, text = probe(processes)
    assert code == 1
    assert "1 outbox entry older than 60 s" in text
    assert "no dispatcher leases" not in text
    assert "no live worker" not in text


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
