"""Tasks due soon after Redis loses its data, behind a far-future backlog.

``--backlog`` tasks are scheduled a day ahead (once; each run indexes them
in Redis again), then each run starts a dispatcher and ``--workers`` worker
processes with their default options and no sweeper, schedules ``--soon``
one-row tasks due evenly over the next ``--window`` seconds, and a quarter
into the window runs ``FLUSHALL``. The dispatcher notices on its next move
and rebuilds the index from the rows (see docs/reference/redis.md, "Noticing
a data loss"); no sweeper runs, so nothing else repairs it.

Lateness is read from the rows (``started_at - run_at``) of the tasks due
after the loss. Each run also checks that none of the backlog ran and that
no task ran twice or early.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.redis_loss --db postgres --runs 3

Prints one JSON object (``--json``) or a line per run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from typing import Any

from benchmarks.harness.stats import lateness_summary
from benchmarks.scenarios.end_to_end import bench_client, setup
from benchmarks.scenarios.rolling_restart import Processes

#: Rows per schedule_many() call and per index write.
CHUNK = 10_000


def build_backlog(size: int) -> None:
    """Schedule ``size`` one-row tasks a day ahead, unless they exist."""
    from benchmarks.harness.benchapp.tasks import KINDS
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask

    far = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=12)
    have = DelayedTask.objects.filter(run_at__gt=far).count()
    if have == size:
        return
    DelayedTask.objects.all().delete()
    for start in range(0, size, CHUNK):
        schedule_many(
            Call(KINDS["write_row"], args=[i], delay=86_400 + i % 3600)
            for i in range(start, min(size, start + CHUNK))
        )


def index_backlog() -> None:
    """Index the backlog in Redis again, as it was before the last run's loss."""
    from django_delayq.models import DelayedTask, Status
    from django_delayq.outbox import entry_of
    from django_delayq.store import index
    from django_delayq.store.connection import get_client

    client = get_client("loop")
    rows = (
        DelayedTask.objects.filter(status=Status.SCHEDULED)
        .only("id", "queue", "shard", "run_at", "priority")
        .iterator(chunk_size=CHUNK)
    )
    batch = []
    for row in rows:
        batch.append(entry_of(row))
        if len(batch) == CHUNK:
            index.add(batch, client)
            batch = []
    if batch:
        index.add(batch, client)


def scenario(soon: int, window: float, workers: int) -> dict[str, Any]:
    from django.utils import timezone

    from benchmarks.harness.benchapp.models import BenchRow
    from benchmarks.harness.benchapp.tasks import KINDS
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask, Status

    client = bench_client()
    client.flushall()
    horizon = timezone.now() + datetime.timedelta(hours=12)
    DelayedTask.objects.filter(run_at__lt=horizon).delete()
    BenchRow.objects.all().delete()
    index_backlog()
    backlog = DelayedTask.objects.count()
    processes = Processes(workers)
    try:
        first = timezone.now() + datetime.timedelta(seconds=2)
        step = datetime.timedelta(seconds=window / soon)
        schedule_many(
            Call(KINDS["write_row"], args=[i], eta=first + step * i)
            for i in range(soon)
        )
        time.sleep(max(0.0, (first - timezone.now()).total_seconds() + window / 4))
        lost_at = timezone.now()
        client.flushall()
        deadline = time.monotonic() + window + 120
        pending = soon
        while time.monotonic() < deadline and pending:
            pending = DelayedTask.objects.filter(
                run_at__lt=horizon, status__in=[Status.SCHEDULED, Status.RUNNING]
            ).count()
            time.sleep(0.2)
    finally:
        processes.stop()
    rows = list(
        DelayedTask.objects.filter(run_at__lt=horizon).values_list(
            "run_at", "started_at", "attempts", "status"
        )
    )
    late = [
        (started - run_at).total_seconds() * 1000
        for run_at, started, _, status in rows
        if status == Status.SUCCEEDED and run_at > lost_at
    ]
    summary: dict[str, Any] = lateness_summary(late, sum(r[0] > lost_at for r in rows))
    summary["unfinished"] = pending
    summary["early"] = sum(
        1 for run_at, started, _, _ in rows if started and started < run_at
    )
    summary["twice"] = sum(1 for _, _, attempts, _ in rows if attempts > 1)
    summary["backlog_ran"] = (
        backlog
        - DelayedTask.objects.filter(
            run_at__gte=horizon, status=Status.SCHEDULED
        ).count()
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--soon", type=int, default=2_000)
    parser.add_argument("--window", type=float, default=20.0, help="seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    began = time.monotonic()
    build_backlog(args.backlog)
    built_s = time.monotonic() - began
    runs = []
    for number in range(args.runs):
        run = scenario(args.soon, args.window, args.workers)
        runs.append(run)
        if not args.json:
            print(
                f"run {number + 1}: {run['fired']} of {run['n']} due after the "
                f"loss started p50 {run['p50_ms']:.0f} ms, p99 {run['p99_ms']:.0f} "
                f"ms, max {run['max_ms']:.0f} ms late; early {run['early']}, "
                f"twice {run['twice']}, backlog run {run['backlog_ran']}, "
                f"unfinished {run['unfinished']}"
            )
    result = {
        "backlog": args.backlog,
        "soon": args.soon,
        "window_s": args.window,
        "workers": args.workers,
        "backlog_built_s": built_s,
        "runs": runs,
        **{
            f"{name}_median": statistics.median(r[name] for r in runs)
            for name in ("p50_ms", "p99_ms", "max_ms")
        },
    }
    if args.json:
        print(json.dumps(result))
    else:
        spread = {
            name: ", ".join(f"{r[name]:.0f}" for r in runs)
            for name in ("p99_ms", "max_ms")
        }
        print(
            f"median of {args.runs}: p99 {result['p99_ms_median']:.0f} ms "
            f"({spread['p99_ms']}), max {result['max_ms_median']:.0f} ms "
            f"({spread['max_ms']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
