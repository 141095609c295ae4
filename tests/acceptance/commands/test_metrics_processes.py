"""Prometheus metrics of real processes: a known workload, then the numbers
scraped from the real /metrics endpoints of ``delayq_worker --metrics-port``
(one process, and a supervisor of several), of ``delayq_sweep`` and of the
Django view."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client, override_settings

from django_delayq import cancel, schedule
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.store import connection
from django_delayq.store.keys import shard_keys
from tests.acceptance.processes import ROOT, Processes
from tests.conftest import delayq_settings
from tests.support.metrics_scrape import Samples, parse, scrape, value
from tests.testapp.models import Ledger
from tests.testapp.tasks import always_fails, fails_once, record
from tools.procs import wait_for
from tools.servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


def done(status: str) -> int:
    return DelayedTask.objects.filter(status=status).count()


def view_samples(client: Client) -> Samples:
    page = client.get("/delayq/metrics")
    assert page.status_code == 200, page.content
    return parse(page.content.decode())


@pytest.fixture
def staff_client() -> Client:
    user = User.objects.create_user("metrics-staff", password="unused", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@override_settings(ROOT_URLCONF="tests.support.metrics_urls")
def test_a_workload_counted_by_the_worker_endpoint_and_the_view(
    processes: Processes, redis_client: redis.Redis, staff_client: Client
) -> None:
    before = view_samples(staff_client)  # also enables metrics in this process
    port = free_port()
    processes.start("delayq_dispatch")
    processes.start("delayq_worker", "--metrics-port", str(port))
    wait_for(lambda: _answers(port), 30, "the worker's metrics endpoint")

    records = [schedule(record, args=[f"m-{i}"]) for i in range(5)]
    schedule(fails_once, args=["metrics-once"])
    schedule(always_fails, args=["metrics-always"])
    doomed = schedule(record, args=["cancelled"], delay=3600)
    assert cancel(doomed)
    later = schedule(record, args=["later"], delay=3600)
    wait_for(lambda: done(Status.SUCCEEDED) == 6, 30, "records and fails_once ran")
    # A forged entry no worker can run: dead-lettered, counted.
    ready = shard_keys("delayq", "orders", records[0].shard).ready
    redis_client.xadd(ready, {"junk": "not a task"})
    wait_for(lambda: done(Status.FAILED) == 1, 30, "always_fails failed for good")
    dead = shard_keys("delayq", "orders", records[0].shard).dead
    wait_for(lambda: redis_client.xlen(dead) == 1, 30, "the forged entry dead")

    # The counters follow the commits they count by a moment (sent after).
    failed = dict(queue="default", task=always_fails.name)
    wait_for(
        lambda: value(scrape(port), "delayq_tasks_failed_total", **failed) == 1,
        10,
        "the failure counted",
    )
    # Counted after the entry is written to the dead stream.
    wait_for(
        lambda: value(scrape(port), "delayq_dead_letters_total", queue="orders") == 1,
        10,
        "the dead letter counted",
    )
    samples = scrape(port)

    def tasks(event: str, task: str, queue: str) -> float:
        return value(samples, f"delayq_tasks_{event}_total", queue=queue, task=task)

    assert tasks("started", record.name, "orders") == 5
    assert tasks("succeeded", record.name, "orders") == 5
    assert tasks("started", fails_once.name, "default") == 2
    assert tasks("retried", fails_once.name, "default") == 1
    assert tasks("succeeded", fails_once.name, "default") == 1
    assert tasks("started", always_fails.name, "default") == 3
    assert tasks("retried", always_fails.name, "default") == 2
    assert tasks("failed", always_fails.name, "default") == 1
    assert tasks("failed", record.name, "orders") == 0
    assert value(samples, "delayq_dead_letters_total", queue="orders") == 1
    # Histograms: one observation per attempt started / finished.
    lateness = dict(queue="orders", task=record.name)
    assert value(samples, "delayq_task_lateness_seconds_count", **lateness) == 5
    assert value(samples, "delayq_task_run_seconds_count", **lateness) == 5
    assert (
        value(
            samples,
            "delayq_task_run_seconds_count",
            queue="default",
            task=always_fails.name,
        )
        == 3
    )
    # The backlog, read at scrape time.
    assert value(samples, "delayq_due_backlog", queue="orders") == 1  # "later"
    assert value(samples, "delayq_ready_backlog", queue="orders") == 0
    assert value(samples, "delayq_dead_letter_backlog", queue="orders") == 1
    assert value(samples, "delayq_workers", queue="orders") == 1
    assert value(samples, "delayq_workers", queue="reports") == 1
    assert value(samples, "delayq_unleased_shards", queue="orders") == 0
    assert value(samples, "delayq_overdue_backlog", queue="orders") == 0
    assert value(samples, "delayq_outbox_backlog", queue="orders") == 0
    assert value(samples, "delayq_up", store="redis") == 1
    assert value(samples, "delayq_up", store="database") == 1
    # What this process scheduled and cancelled, through the view.
    after = view_samples(staff_client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("delayq_tasks_scheduled_total", queue="orders", task=record.name) == 7
    assert grew("delayq_tasks_cancelled_total", queue="orders", task=record.name) == 1
    assert (
        grew("delayq_tasks_scheduled_total", queue="default", task=always_fails.name)
        == 1
    )
    assert value(after, "delayq_due_backlog", queue="orders") == 1
    assert value(after, "delayq_workers", queue="orders") == 1
    assert later.status == Status.SCHEDULED


@override_settings(ROOT_URLCONF="tests.support.metrics_urls")
def test_an_outbox_write_and_its_replay_by_the_sweeper(
    processes: Processes, redis_client: redis.Redis, staff_client: Client, settings
) -> None:
    before = view_samples(staff_client)
    working = settings.DELAYQ
    settings.DELAYQ = delayq_settings(f"redis://127.0.0.1:{free_port()}/0")
    try:
        task = schedule(record, args=["via-outbox"], delay=3600)
        # Redis is unreachable from this process now: the view says so.
        unreachable = view_samples(staff_client)
    finally:
        settings.DELAYQ = working
        connection.reset()
    assert OutboxEntry.objects.filter(task_id=task.pk).exists()
    after = view_samples(staff_client)
    written = value(after, "delayq_outbox_writes_total", queue="orders") - value(
        before, "delayq_outbox_writes_total", queue="orders"
    )
    assert written == 1
    assert value(unreachable, "delayq_up", store="redis") == 0
    assert ("delayq_due_backlog", (("queue", "orders"),)) not in unreachable
    assert value(unreachable, "delayq_outbox_backlog", queue="orders") == 1
    assert value(after, "delayq_outbox_backlog", queue="orders") == 1

    port = free_port()
    processes.start("delayq_sweep", "--interval", "0.5", "--metrics-port", str(port))
    wait_for(lambda: not OutboxEntry.objects.exists(), 30, "the outbox replayed")
    wait_for(
        lambda: value(scrape(port), "delayq_sweeps_total", outcome="done") >= 1,
        30,
        "a sweep counted",
    )
    samples = scrape(port)
    assert value(samples, "delayq_outbox_replays_total", queue="orders") == 1
    assert value(samples, "delayq_sweep_repairs_total", kind="replayed") == 1
    assert value(samples, "delayq_sweep_repairs_total", kind="reindexed") == 0
    assert value(samples, "delayq_outbox_backlog", queue="orders") == 0
    assert value(samples, "delayq_due_backlog", queue="orders") == 1


@override_settings(ROOT_URLCONF="tests.support.metrics_urls")
def test_the_view_is_for_staff_or_the_token_bearer(
    redis_client: redis.Redis, staff_client: Client, settings
) -> None:
    anonymous = Client()
    assert anonymous.get("/delayq/metrics").status_code == 403
    settings.DELAYQ_METRICS_TOKEN = "s3cret"
    bearer = {"HTTP_AUTHORIZATION": "Bearer s3cret"}
    assert anonymous.get("/delayq/metrics", **bearer).status_code == 200
    wrong = {"HTTP_AUTHORIZATION": "Bearer guess"}
    assert anonymous.get("/delayq/metrics", **wrong).status_code == 403
    assert staff_client.post("/delayq/metrics").status_code == 405


def test_worker_processes_are_summed_by_the_supervisor_endpoint(
    processes: Processes, redis_client: redis.Redis
) -> None:
    """Two children, recycled every 4 tasks: every count survives in the sum."""
    port = free_port()
    processes.start("delayq_dispatch")
    supervisor = processes.start(
        "delayq_worker",
        "--processes",
        "2",
        "--max-tasks-per-child",
        "4",
        "--metrics-port",
        str(port),
    )
    wait_for(lambda: _answers(port), 30, "the supervisor's metrics endpoint")
    tasks = [schedule(record, args=[f"p-{i}"]) for i in range(20)]
    wait_for(lambda: done(Status.SUCCEEDED) == len(tasks), 60, "20 tasks ran")
    pids = set(Ledger.objects.values_list("pid", flat=True))
    labels = dict(queue="orders", task=record.name)
    wait_for(
        lambda: value(scrape(port), "delayq_tasks_succeeded_total", **labels) == 20,
        15,
        "the sum of the children's counters",
    )
    samples = scrape(port)
    assert value(samples, "delayq_tasks_started_total", **labels) == 20
    assert value(samples, "delayq_task_lateness_seconds_count", **labels) == 20
    # Children come and go as they are recycled; the live ones show.
    wait_for(
        lambda: value(scrape(port), "delayq_workers", queue="orders") == 2,
        30,
        "both current worker processes live",
    )
    # 4 tasks per child at most: at least 5 children ran them, most of them
    # recycled (gone) by now, and their counts are in the sums all the same.
    assert len(pids) >= 5
    supervisor.terminate()
    assert supervisor.wait(timeout=30) == 0
    wait_for(lambda: not _answers(port), 10, "the metrics process stopped")


def _answers(port: int) -> bool:
    try:
        scrape(port)
    except (urllib.error.URLError, ConnectionError):
        return False
    return True


def test_a_busy_port_is_a_clear_command_error(
    processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    first = processes.start("delayq_worker", "--metrics-port", str(port))
    wait_for(lambda: _answers(port), 30, "the first worker's endpoint")
    for extra in (["--once"], ["--processes", "2"]):
        done_ = subprocess.run(
            [
                sys.executable,
                "-m",
                "django",
                "delayq_worker",
                "--metrics-port",
                str(port),
                *extra,
            ],
            env={**processes.env, "TMPDIR": str(temporary)},
            cwd=ROOT,
            capture_output=True,
            timeout=60,
        )
        assert done_.returncode == 1, done_.stderr
        assert f"cannot serve metrics on 127.0.0.1:{port}" in done_.stderr.decode()
    assert first.poll() is None
    assert list(temporary.iterdir()) == []  # the supervisor's directory removed


def test_the_dispatcher_and_delayq_run_serve_metrics(
    processes: Processes, redis_client: redis.Redis
) -> None:
    dispatch_port, run_port = free_port(), free_port()
    processes.start("delayq_dispatch", "--metrics-port", str(dispatch_port))
    wait_for(lambda: _answers(dispatch_port), 30, "the dispatcher's endpoint")
    wait_for(
        lambda: (
            value(scrape(dispatch_port), "delayq_unleased_shards", queue="orders") == 0
        ),
        30,
        "the dispatcher leasing every shard, as its endpoint says",
    )
    samples = scrape(dispatch_port)
    assert value(samples, "delayq_workers", queue="orders") == 0
    assert value(samples, "delayq_up", store="database") == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)

    processes.start("delayq_run", "--metrics-port", str(run_port))
    wait_for(lambda: _answers(run_port), 30, "delayq_run's endpoint")
    task = schedule(record, args=["run"])
    wait_for(lambda: done(Status.SUCCEEDED) == 1, 30, "the task ran")
    labels = dict(queue="orders", task=record.name)
    # The counter follows the commit it counts by a moment (sent after).
    wait_for(
        lambda: value(scrape(run_port), "delayq_tasks_succeeded_total", **labels) == 1,
        10,
        "the success counted",
    )
    wait_for(
        lambda: value(scrape(run_port), "delayq_sweeps_total", outcome="done") >= 1,
        30,
        "delayq_run's sweeper counted",
    )
    samples = scrape(run_port)
    assert value(samples, "delayq_tasks_succeeded_total", **labels) == 1
    assert value(samples, "delayq_task_lateness_seconds_count", **labels) == 1
    assert value(samples, "delayq_workers", queue="orders") == 1
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED


def test_a_killed_metrics_process_is_reaped_logged_and_restarted(
    processes: Processes, redis_client: redis.Redis
) -> None:
    port = free_port()
    supervisor = processes.start(
        "delayq_worker", "--processes", "2", "--metrics-port", str(port)
    )
    wait_for(lambda: _answers(port), 30, "the supervisor's metrics endpoint")
    # The supervisor logs the serving process once it reported back, which
    # is after it started listening: /metrics may answer before the line.
    listening = re.compile(r"metrics process (\d+) listening on ")
    wait_for(
        lambda: listening.search(processes.log(supervisor)),
        30,
        "the log naming the metrics process",
    )
    log = processes.log(supervisor)
    (first,) = listening.findall(log)
    os.kill(int(first), signal.SIGKILL)
    restarted = re.compile(
        rf"the metrics process serving http://127\.0\.0\.1:{port}/metrics "
        rf"\(process {first}\) was killed by SIGKILL after [\d.]+ s; restarting "
        rf"it in 0 s\n.*the metrics process serving "
        rf"http://127\.0\.0\.1:{port}/metrics restarted \(process (\d+)\)",
        re.S,
    )
    wait_for(
        lambda: restarted.search(processes.log(supervisor)) is not None,
        30,
        "the log saying the metrics process was restarted",
    )
    wait_for(lambda: _answers(port), 30, "/metrics answering again")
    # Reaped: no zombie left of the killed process.
    assert not Path(f"/proc/{first}").exists()
    match = restarted.search(processes.log(supervisor))
    assert match is not None
    assert match.group(1) != first
    # It serves what the first one did.
    wait_for(
        lambda: value(scrape(port), "delayq_workers", queue="orders") == 2,
        30,
        "both worker processes live, as the new metrics process says",
    )
    supervisor.terminate()
    assert supervisor.wait(timeout=30) == 0
    wait_for(lambda: not _answers(port), 10, "the metrics process stopped")


def _worker_with_multiproc_dir(
    processes: Processes, directory: Path
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "delayq_worker",
            "--processes",
            "2",
            "--metrics-port",
            str(free_port()),
        ],
        env={**processes.env, "PROMETHEUS_MULTIPROC_DIR": str(directory)},
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )


def test_a_symlinked_or_foreign_multiproc_dir_is_refused(
    processes: Processes, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "counter_1.db").write_bytes(b"not ours")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    done_ = _worker_with_multiproc_dir(processes, link)
    assert done_.returncode == 1
    assert (
        f"CommandError: --metrics-port: PROMETHEUS_MULTIPROC_DIR='{link}' is a "
        f"symlink: name a directory of its own"
    ) in done_.stderr.decode()
    assert (elsewhere / "counter_1.db").read_bytes() == b"not ours"

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "counter_2.db").write_bytes(b"theirs")
    os.chown(foreign, 65534, 65534)  # the tests run as root: "nobody"'s now
    done_ = _worker_with_multiproc_dir(processes, foreign)
    assert done_.returncode == 1
    assert (
        f"PROMETHEUS_MULTIPROC_DIR='{foreign}' belongs to another user (uid 65534"
    ) in done_.stderr.decode()
    assert (foreign / "counter_2.db").read_bytes() == b"theirs"
