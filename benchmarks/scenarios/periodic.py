"""Periodic schedules: N schedules ``every=1 s`` against N plain tasks a second.

Two scenarios on one dispatcher and ``--workers`` worker processes, each
measured over the same ``--window`` after a warm-up:

- **periodic**: ``--schedules`` entries of ``DELAYQ["PERIODIC"]`` (the
  ``noop`` task, ``every: 1``), declared by ``benchmarks.harness.settings`` when
  ``DELAYQ_BENCH_PERIODIC`` is set; the dispatcher's keeper writes each
  tick as a task row a few seconds ahead;
- **plain** (the baseline): the same load as ordinary tasks, N due at each
  whole second, written with ``schedule_many()`` before the processes start,
  so that the window holds only what dispatching and running them costs.

For each: lateness from the rows (``started_at - run_at``, the moment the
task function starts minus the tick) over the ticks due in the window;
Redis commands per second (``INFO commandstats`` deltas); on PostgreSQL,
rows written and transactions committed per second (``pg_stat_user_tables``
and ``pg_stat_database`` deltas; the statistics are flushed about once a
second, so a 10 s window is accurate to a few percent). What a schedule
costs to keep is the periodic figure less the plain one, divided by N.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.periodic --db postgres --schedules 1000 --runs 3

Prints one JSON object (``--json``) or a line per scenario.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.harness.stats import lateness_summary
from benchmarks.scenarios.end_to_end import bench_client, running, setup

#: Seconds the processes run before the window: start-up and the first
#: planning rounds (the keeper creates the schedules' rows).
WARMUP = 4.0
#: Seconds the plain scenario's tasks cover for the processes' start-up.
STARTUP = 30.0


def redis_calls(client: Any) -> int:
    """Commands Redis has run, from ``INFO commandstats``."""
    stats = client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


def database_counters() -> dict[str, int]:
    """Rows written and transactions committed so far (PostgreSQL only)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) "
            "FROM pg_stat_user_tables"
        )
        (rows,) = cursor.fetchone()
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = "
            "current_database()"
        )
        (commits,) = cursor.fetchone()
    return {"rows": int(rows), "commits": int(commits)}


def scenario(
    schedules: int, window: float, workers: int, periodic: bool
) -> dict[str, Any]:
    from django.db import connection
    from django.utils import timezone

    from benchmarks.harness.benchapp.tasks import noop
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask, PeriodicSchedule, Status

    client = bench_client()
    client.flushall()
    DelayedTask.objects.all().delete()
    PeriodicSchedule.objects.all().delete()
    if periodic:
        os.environ["DELAYQ_BENCH_PERIODIC"] = str(schedules)
    else:
        # Every second from now to well past the window, N due at each:
        # the processes' start-up (several seconds on a busy machine) comes
        # before the warm-up and the window, and must not run past the
        # last of them.
        first = timezone.now().replace(microsecond=0) + datetime.timedelta(seconds=2)
        seconds = int(STARTUP + WARMUP + window + 4)
        for second in range(seconds):
            schedule_many(
                Call(noop, args=[i], eta=first + datetime.timedelta(seconds=second))
                for i in range(schedules)
            )
    # A backend flushes its statistics when it exits, an idle one only
    # seconds later: end this one's, so its writes above fall before the
    # window.
    connection.close()
    try:
        with running(workers):
            deadline = time.monotonic() + 60
            while periodic and PeriodicSchedule.objects.count() < schedules:
                if time.monotonic() > deadline:
                    raise RuntimeError("the keeper did not plan the schedules in 60 s")
                time.sleep(0.2)
            time.sleep(WARMUP)  # pacing: the window starts once all is running
            start = timezone.now()
            calls, counters = redis_calls(client), database_counters()
            time.sleep(window)
            calls = redis_calls(client) - calls
            after = database_counters()
            end = timezone.now()
            # The ticks of the window start before the processes stop.
            time.sleep(2.0)
    finally:
        os.environ.pop("DELAYQ_BENCH_PERIODIC", None)
    ticks = DelayedTask.objects.filter(run_at__gte=start, run_at__lt=end)
    expected = ticks.count()
    late = [
        (started - run_at).total_seconds() * 1000
        for run_at, started in ticks.filter(status=Status.SUCCEEDED).values_list(
            "run_at", "started_at"
        )
    ]
    summary: dict[str, Any] = lateness_summary(late, expected)
    elapsed = (end - start).total_seconds()
    summary["ticks_per_s"] = expected / elapsed
    summary["redis_cmds_per_s"] = calls / elapsed
    for name, value in after.items():
        summary[f"db_{name}_per_s"] = (value - counters[name]) / elapsed
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--window", type=float, default=10.0, help="seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    runs = []
    for number in range(args.runs):
        run = {
            "plain": scenario(args.schedules, args.window, args.workers, False),
            "periodic": scenario(args.schedules, args.window, args.workers, True),
        }
        runs.append(run)
        if not args.json:
            for name, figures in run.items():
                print(f"run {number + 1} {name}: {json.dumps(figures)}")
    result: dict[str, Any] = {
        "db": args.db,
        "schedules": args.schedules,
        "window_s": args.window,
        "workers": args.workers,
        "runs": runs,
    }
    for name in ("plain", "periodic"):
        for figure in runs[0][name]:
            values = [run[name][figure] for run in runs]
            result[f"{name}_{figure}"] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    for figure in ("redis_cmds_per_s", "db_rows_per_s", "db_commits_per_s"):
        if figure in runs[0]["plain"]:
            extra = [
                (run["periodic"][figure] - run["plain"][figure]) / args.schedules
                for run in runs
            ]
            result[f"per_schedule_{figure}"] = {
                "median": statistics.median(extra),
                "min": min(extra),
                "max": max(extra),
            }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if isinstance(value, dict):
                print(
                    f"{key}: {value['median']:.3g} ({value['min']:.3g}-"
                    f"{value['max']:.3g})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
