"""Schedule throughput: django-delayq against the same work written by hand.

Baselines, measured in the same run on the same servers:

* single: ``DelayedTask.objects.create(...)`` + one ``ZADD`` per task, which is
  the least a hand-written "row, then index it" can do;
* bulk: ``bulk_create`` of 1,000 rows + one pipelined ``ZADD`` per batch.

Run it through the servers runner so it gets a private Redis and PostgreSQL
(``--mariadb`` adds MariaDB to the databases it runs on)::

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.schedule_rate

Every loop is bounded by a task count; nothing runs unbounded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable


def setup(db: str) -> None:
    os.environ["DELAYQ_BENCH_DB"] = db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.harness.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def analyze_task_table() -> None:
    """Refresh the planner's statistics of the emptied task table."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE django_delayq_delayedtask")
        elif connection.vendor == "mysql":
            cursor.execute("ANALYZE TABLE django_delayq_delayedtask")
            cursor.fetchall()  # it answers with a result set


def run(
    db: str, single_n: int, bulk_n: int, repeats: int
) -> list[tuple[str, float, float]]:
    setup(db)
    import redis
    from django.db import transaction

    from benchmarks.harness.benchapp.tasks import noop
    from django_delayq import Call, schedule, schedule_many
    from django_delayq.ids import uuid7
    from django_delayq.models import DelayedTask
    from django_delayq.timing import resolve_run_at, to_score

    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])

    def reset() -> None:
        DelayedTask.objects.all().delete()
        client.flushall()
        analyze_task_table()

    def ours_single() -> None:
        for i in range(single_n):
            with transaction.atomic():
                schedule(noop, delay=60, args=[i])

    def baseline_single() -> None:
        for i in range(single_n):
            with transaction.atomic():
                run_at = resolve_run_at(60, None)
                row = DelayedTask.objects.create(
                    id=uuid7(), name=noop.name, run_at=run_at, args=[i]
                )
            client.zadd("baseline:due", {row.pk.bytes: to_score(run_at)})

    def ours_bulk() -> None:
        for start in range(0, bulk_n, 1000):
            schedule_many(
                Call(noop, args=[i], delay=60) for i in range(start, start + 1000)
            )

    def baseline_bulk() -> None:
        for start in range(0, bulk_n, 1000):
            run_at = resolve_run_at(60, None)
            rows = [
                DelayedTask(id=uuid7(), name=noop.name, run_at=run_at, args=[i])
                for i in range(start, start + 1000)
            ]
            with transaction.atomic():
                DelayedTask.objects.bulk_create(rows)
            client.zadd(
                "baseline:due", {row.pk.bytes: to_score(run_at) for row in rows}
            )

    def timed(fn: Callable[[], None], n: int) -> float:
        reset()
        started = time.perf_counter()
        fn()
        return n / (time.perf_counter() - started)

    results = []
    for label, ours, base, n in (
        ("single schedule()", ours_single, baseline_single, single_n),
        ("bulk schedule_many()", ours_bulk, baseline_bulk, bulk_n),
    ):
        # Rounds alternate which side goes first, so load that comes and
        # goes on a shared machine hits both sides alike.
        ours_rates, base_rates = [], []
        for round_ in range(repeats):
            pair = [(ours, ours_rates), (base, base_rates)]
            for fn, rates in pair if round_ % 2 else reversed(pair):
                rates.append(timed(fn, n))
        results.append(
            (label, statistics.median(ours_rates), statistics.median(base_rates))
        )
    reset()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "mariadb"], default=None)
    parser.add_argument("--single", type=int, default=2000, help="tasks per single run")
    parser.add_argument("--bulk", type=int, default=20000, help="tasks per bulk run")
    parser.add_argument("--repeats", type=int, default=6, help="rounds (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    args = parser.parse_args()
    if args.db is None:
        # One process per database: Django is configured once per process.
        import subprocess

        code = 0
        # MariaDB too when the servers runner started one (--mariadb).
        dbs = ["sqlite", "postgres"]
        dbs += ["mariadb"] if "DELAYQ_MARIADB_HOST" in os.environ else []
        for db in dbs:
            argv = [
                sys.executable,
                "-m",
                "benchmarks.scenarios.schedule_rate",
                "--db",
                db,
            ]
            argv += ["--single", str(args.single), "--bulk", str(args.bulk)]
            argv += ["--repeats", str(args.repeats)]
            argv += ["--json"] if args.json else []
            code |= subprocess.call(argv)
        return code
    if args.json:
        results = run(args.db, args.single, args.bulk, args.repeats)
        print(
            json.dumps(
                [
                    {"db": args.db, "what": label, "ours": ours, "baseline": base}
                    for label, ours, base in results
                ]
            )
        )
        return 0
    print(f"\n{args.db}: median of {args.repeats} runs")
    print("| what | django-delayq tasks/s | baseline tasks/s | ratio |")
    print("|---|---:|---:|---:|")
    for label, ours, base in run(args.db, args.single, args.bulk, args.repeats):
        print(f"| {label} | {ours:,.0f} | {base:,.0f} | {ours / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
