"""End to end: tasks scheduled ahead, run by real dispatcher and worker processes.

A scenario schedules N tasks (``schedule_many()``, before the first is due)
whose run_at values are spread evenly over a window, with a dispatcher and W
worker processes (``delayq_dispatch``, ``delayq_worker``) already running,
then waits (bounded) until every row has finished. Lateness is read from the
rows: ``started_at - run_at``, the time from when a task was due to when a
worker started it, both on this machine's clock (the same measure the peers
get: the moment the task function starts). Completed/s is tasks finished
divided by the time from the first due time to the last finish.

``--all-due`` is the throughput scenario: all N tasks share one due time, so
the workers start on a full ready stream; started/s is tasks finished divided
by the time from the first start to the last finish (what the worker
processes sustain, without the dispatch lead-in). ``--task`` picks the task
function: ``noop``, or ``write_row`` (one ORM insert), the same functions
that ``benchmarks.scenarios.direct_call`` calls with no queue.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.end_to_end --db postgres --tasks 20000 --window 2

Prints one JSON object (``--json``) or a line per scenario.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from benchmarks.harness.stats import lateness_summary


def setup(db: str) -> None:
    os.environ["DELAYQ_BENCH_DB"] = db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.harness.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def bench_client() -> Any:
    """A client of the benchmark's Redis: a cluster client when
    ``DELAYQ_REDIS_CLUSTER=1`` (see ``benchmarks.scenarios.cluster``)."""
    import redis

    url = os.environ["DELAYQ_REDIS_URL"]
    if os.environ.get("DELAYQ_REDIS_CLUSTER") == "1":
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url)
    return redis.Redis.from_url(url)


def _blocked_readers(client: Any) -> int:
    """Connections blocked in ``XREADGROUP``, over every node."""
    nodes = client.get_primaries() if hasattr(client, "get_primaries") else [None]
    blocked = 0
    for node in nodes:
        listed = (
            client.client_list()
            if node is None
            else client.client_list(target_nodes=node)
        )
        blocked += sum(1 for c in listed if c.get("cmd") == "xreadgroup")
    return blocked


def _command(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "django", name, *args]


def worker_args(
    prefetch: int | None = None,
    concurrency: int = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``delayq_worker`` options of a scenario; ``extra`` is passed as is
    (options the worker command gains later need no change here)."""
    args = ["--concurrency", str(concurrency)]
    args += [] if prefetch is None else ["--prefetch", str(prefetch)]
    return [*args, *extra]


@contextmanager
def running(
    workers: int,
    prefetch: int | None = None,
    concurrency: int = 1,
    extra_worker_args: Sequence[str] = (),
) -> Iterator[None]:
    """A dispatcher and ``workers`` worker processes, stopped on exit by PID."""
    client = bench_client()
    # On a cluster each worker process blocks once per shard (its readers),
    # on one Redis once per thread.
    shards = int(os.environ.get("DELAYQ_BENCH_SHARDS", "1"))
    cluster = os.environ.get("DELAYQ_REDIS_CLUSTER") == "1"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    extra = worker_args(prefetch, concurrency, extra_worker_args)
    argvs = [_command("delayq_dispatch", "-v", "0")]
    argvs += [_command("delayq_worker", "-v", "0", *extra) for _ in range(workers)]
    processes = [
        subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL) for argv in argvs
    ]
    try:
        # Ready when every worker blocks in its first read and the dispatcher
        # holds the shard's lease.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in processes):
                raise RuntimeError("a benchmark process exited during start-up")
            reading = _blocked_readers(client)
            blocking = shards if cluster else concurrency
            if reading >= workers * blocking and client.exists(
                "delayq:{default:0}:lease"
            ):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("dispatcher and workers did not start within 60 s")
        yield
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _load() -> float:
    """The machine's 1-minute load average (``/proc/loadavg``), or NaN."""
    try:
        with open("/proc/loadavg") as loadavg:
            return float(loadavg.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def scenario(
    n: int,
    window: float,
    workers: int,
    time_limit: float,
    prefetch: int | None = None,
    concurrency: int = 1,
    *,
    kind: str = "noop",
    all_due: bool = False,
    extra_worker_args: Sequence[str] = (),
) -> dict[str, float]:
    """Run ``n`` tasks due evenly over ``window`` seconds (all at once with
    ``all_due``); return the figures."""
    from django.db import connection
    from django.utils import timezone

    from benchmarks.harness.benchapp.models import BenchRow
    from benchmarks.harness.benchapp.tasks import KINDS
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask, Status

    func = KINDS[kind]
    client = bench_client()
    client.flushall()
    DelayedTask.objects.all().delete()
    BenchRow.objects.all().delete()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE django_delayq_delayedtask")
    load_before = _load()
    with running(workers, prefetch, concurrency, extra_worker_args):
        # Scheduling must be over before the first task is due: allow for a
        # slow bulk rate (5,000/s; 2,000/s on MySQL and MariaDB, which take
        # the rows through bulk_create(): about 3,500/s here) plus a second.
        lead = 1.0 + n / (2000 if connection.vendor == "mysql" else 5000)
        first = timezone.now() + datetime.timedelta(seconds=lead)
        step = datetime.timedelta(seconds=0 if all_due else window / n)
        for start in range(0, n, 5000):
            schedule_many(
                Call(func, args=[i], eta=first + step * i)
                for i in range(start, min(n, start + 5000))
            )
        scheduled = timezone.now()
        if scheduled > first:
            raise RuntimeError("scheduling took longer than its lead; raise it")
        deadline = time.monotonic() + lead + window + time_limit
        pending = n
        while time.monotonic() < deadline:
            pending = DelayedTask.objects.filter(
                status__in=[Status.SCHEDULED, Status.RUNNING]
            ).count()
            if not pending:
                break
            time.sleep(0.2)
    rows = list(
        DelayedTask.objects.filter(status=Status.SUCCEEDED).values_list(
            "run_at", "started_at", "finished_at"
        )
    )
    late = [(started - run_at).total_seconds() * 1000 for run_at, started, _ in rows]
    summary = lateness_summary(late, n)
    if rows:
        last_finish = max(f for _, _, f in rows)
        span = (last_finish - min(r for r, _, _ in rows)).total_seconds()
        summary["completed_per_s"] = len(rows) / max(span, 1e-3)
        busy = (last_finish - min(s for _, s, _ in rows)).total_seconds()
        summary["started_per_s"] = len(rows) / max(busy, 1e-3)
    else:
        summary["completed_per_s"] = summary["started_per_s"] = 0.0
    summary["unfinished"] = pending
    # What else ran on the machine: a reader tells its mood from the code's.
    summary["load_before"] = load_before
    summary["load_after"] = _load()
    summary["workers"] = workers
    summary["threads"] = concurrency
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", choices=["sqlite", "postgres", "mariadb"], default="postgres"
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--window", type=float, default=2.0, help="seconds")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=1, help="threads")
    parser.add_argument("--task", choices=["noop", "write_row"], default="noop")
    parser.add_argument(
        "--all-due", action="store_true", help="one due time for all (throughput)"
    )
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="passed to delayq_worker as is (repeatable)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    result = scenario(
        args.tasks,
        args.window,
        args.workers,
        args.time_limit,
        args.prefetch,
        args.concurrency,
        kind=args.task,
        all_due=args.all_due,
        extra_worker_args=args.worker_arg,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.db}: {args.tasks:,} due over {args.window} s, "
            f"{args.workers} worker(s): "
            + ", ".join(f"{k}={v:,.1f}" for k, v in result.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
