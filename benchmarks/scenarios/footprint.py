"""Footprint and growth: bytes per scheduled task, and speed as the backlog grows.

For each size (default 10k, 100k, 1M scheduled tasks, far in the future),
the backlog is grown with ``schedule_many()`` and measured:

* Redis bytes per task: INFO ``used_memory`` growth / tasks; baseline: the
  same ids ZADDed by hand as 36-character UUID strings, the usual home-made
  layout;
* database bytes per row: table plus indexes (PostgreSQL
  ``pg_total_relation_size``; SQLite file pages);
* single ``schedule()`` rate with that backlog in place;
* dispatch rate: 10,000 extra due ids moved by ``Dispatcher.run(once=True)``
  past the backlog.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.footprint --db postgres \\
            --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

from benchmarks.scenarios.end_to_end import setup


def _db_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_total_relation_size('django_delayq_delayedtask')")
        else:
            cursor.execute(
                "SELECT page_count * page_size FROM pragma_page_count(), "
                "pragma_page_size()"
            )
        return int(cursor.fetchone()[0])


def measure(sizes: list[int], probe: int) -> list[dict[str, float]]:
    import redis
    from django.db import connection, transaction

    from benchmarks.harness.benchapp.tasks import noop
    from django_delayq import Call, schedule, schedule_many
    from django_delayq.dispatcher import Dispatcher
    from django_delayq.models import DelayedTask
    from django_delayq.store.index import IndexEntry, add

    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])
    client.flushall()
    DelayedTask.objects.all().delete()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM FULL django_delayq_delayedtask")
    else:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM")
    redis_base = int(client.info("memory")["used_memory"])
    db_base = _db_bytes()
    results = []
    scheduled = 0
    for size in sorted(sizes):
        while scheduled < size:
            batch = min(5000, size - scheduled)
            schedule_many(
                Call(noop, args=[scheduled + i], delay=86_400 + (scheduled + i) / 1000)
                for i in range(batch)
            )
            scheduled += batch
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE django_delayq_delayedtask")
        redis_bytes = (int(client.info("memory")["used_memory"]) - redis_base) / size
        db_bytes = (_db_bytes() - db_base) / size
        # Single schedule() with the backlog in place (then cancelled out
        # of the figures by measuring memory first).
        started = time.perf_counter()
        for i in range(probe):
            with transaction.atomic():
                schedule(noop, delay=90_000, args=[i])
        single = probe / (time.perf_counter() - started)
        # 10,000 due ids on top of the backlog, moved by one dispatcher pass.
        due = [IndexEntry(uuid.uuid4(), "default", 0, 1000 + i) for i in range(10_000)]
        for start in range(0, len(due), 1000):
            add(due[start : start + 1000], client)
        started = time.perf_counter()
        moved = Dispatcher(queues=["default"], batch_size=1000).run(once=True).moved
        move_rate = moved / (time.perf_counter() - started)
        client.delete("delayq:{default:0}:ready")
        # The baseline layout, measured alone on the same server.
        baseline = _baseline_bytes(client, size)
        results.append(
            {
                "size": size,
                "redis_bytes_per_task": redis_bytes,
                "baseline_redis_bytes_per_task": baseline,
                "db_bytes_per_row": db_bytes,
                "single_schedule_per_s": single,
                "dispatch_ids_per_s": move_rate,
            }
        )
        scheduled += probe
    return results


def _baseline_bytes(client: object, size: int) -> float:
    """Bytes per member of a ZSET of ``size`` 36-character UUID strings."""
    import redis

    assert isinstance(client, redis.Redis)
    key = "baseline:due"
    before = int(client.info("memory")["used_memory"])
    pipe = client.pipeline(transaction=False)
    for start in range(0, size, 1000):
        pipe.zadd(key, {str(uuid.uuid4()): start + i for i in range(1000)})
        if len(pipe) >= 50:
            pipe.execute()
    pipe.execute()
    grown = int(client.info("memory")["used_memory"]) - before
    client.delete(key)
    return grown / size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--probe", type=int, default=300, help="single schedules")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    results = measure(args.sizes, args.probe)
    if args.json:
        print(json.dumps(results))
    else:
        for row in results:
            print(", ".join(f"{k}={v:,.1f}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
