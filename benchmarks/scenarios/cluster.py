"""One Redis against a Redis Cluster: move rate, started/s, recovery.

Both with the same shard count, on this machine: the redis-server the
harness started (``DELAYQ_REDIS_URL``) and a cluster of three primaries
with a replica each, started here (``tools.servers.cluster``).

* move rate: a backlog of due ids over every shard, moved by
  ``Dispatcher.run(once=True)``: ids per second.
* started/s: tasks all due at once (``benchmarks.scenarios.end_to_end``'s throughput
  scenario), one dispatcher and W worker processes.
* recovery (the cluster only): tasks due steadily, a dispatcher, two worker
  processes and a sweeper (``--interval 1``) running, and the primary of
  shard 0 SIGKILLed: how long until a replica serves its slots, how long
  until the dead primary's shards start tasks again, and how late the
  latest task was.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.cluster
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.scenarios import end_to_end

CLUSTER_ENV = ("DELAYQ_REDIS_URL", "DELAYQ_REDIS_CLUSTER", "DELAYQ_BENCH_SHARDS")


@contextmanager
def topology(url: str, cluster: bool, shards: int) -> Iterator[None]:
    """Point this process (settings) and its children (environment) at one
    Redis or at the cluster."""
    from django.test.utils import override_settings

    saved = {key: os.environ.get(key) for key in CLUSTER_ENV}
    os.environ.update(
        DELAYQ_REDIS_URL=url,
        DELAYQ_REDIS_CLUSTER="1" if cluster else "0",
        DELAYQ_BENCH_SHARDS=str(shards),
    )
    delayq = {
        "REDIS_URL": url,
        "REDIS_CLUSTER": cluster,
        "QUEUES": {"default": {"shards": shards}},
    }
    try:
        with override_settings(DELAYQ=delayq):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def move_rate(backlog: int, shards: int) -> float:
    """Due ids moved per second by one ``--once`` pass over every shard."""
    from django_delayq.dispatcher import Dispatcher
    from django_delayq.models import DelayedTask
    from django_delayq.store.connection import get_client
    from django_delayq.store.index import IndexEntry, add

    client = end_to_end.bench_client()
    client.flushall()
    # No rows are left over from the scenarios before: on an empty Redis
    # the first move rebuilds the index from the rows, and any left would
    # be moved too.
    DelayedTask.objects.all().delete()
    # A pass on the empty Redis first, as a running system has made (the
    # first move on a Redis without its index marker rebuilds the index).
    Dispatcher(queues=["default"]).run(once=True)
    past = int(time.time() * 1000) - 60_000
    entries = [
        IndexEntry(uuid.uuid4(), "default", n % shards, past) for n in range(backlog)
    ]
    for start in range(0, backlog, 10_000):
        add(entries[start : start + 10_000], get_client("schedule"))
    dispatcher = Dispatcher(queues=["default"])
    get_client("loop")  # a cluster client learns the slot map when built
    began = time.perf_counter()
    moved = dispatcher.run(once=True).moved
    took = time.perf_counter() - began
    if moved != backlog:
        raise RuntimeError(f"moved {moved} of {backlog}")
    return backlog / took


def recovery(tasks: int, window: float, cluster: Any) -> dict[str, float]:
    """Kill the primary of shard 0 a third into a steady load; see the module
    docstring for what is measured."""
    from django.utils import timezone

    from benchmarks.harness.benchapp.tasks import KINDS
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask, Status
    from django_delayq.store.keys import shard_keys

    client = end_to_end.bench_client()
    client.flushall()
    DelayedTask.objects.all().delete()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    sweeper = subprocess.Popen(
        end_to_end._command("delayq_sweep", "-v", "0", "--interval", "1"),
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        with end_to_end.running(2):
            first = timezone.now() + datetime.timedelta(seconds=1.0)
            step = datetime.timedelta(seconds=window / tasks)
            schedule_many(
                Call(KINDS["noop"], args=[i], eta=first + step * i)
                for i in range(tasks)
            )
            time.sleep(1.0 + window / 3)
            doomed = cluster.primary_of(shard_keys("delayq", "default", 0).ready)
            shards = int(os.environ["DELAYQ_BENCH_SHARDS"])
            dead = {
                n
                for n in range(shards)
                if cluster.primary_of(shard_keys("delayq", "default", n).ready)
                is doomed
            }
            killed_at = timezone.now()
            killed = time.monotonic()
            doomed.kill()
            cluster.wait_for_failover(doomed, timeout=60)
            failover = time.monotonic() - killed
            deadline = time.monotonic() + window + 60
            while time.monotonic() < deadline:
                left = DelayedTask.objects.filter(
                    status__in=[Status.SCHEDULED, Status.RUNNING]
                ).count()
                if not left:
                    break
                time.sleep(0.2)
    finally:
        sweeper.send_signal(signal.SIGTERM)
        sweeper.wait(timeout=30)
    rows = list(
        DelayedTask.objects.filter(status=Status.SUCCEEDED).values_list(
            "shard", "run_at", "started_at"
        )
    )
    again = [
        started
        for shard, run_at, started in rows
        if shard in dead and run_at >= killed_at
    ]
    late = [(started - run_at).total_seconds() for _, run_at, started in rows]
    return {
        "tasks": tasks,
        "ran": len(rows),
        "failover_s": failover,
        "shards_on_killed_primary": len(dead),
        "running_again_s": (
            (min(again) - killed_at).total_seconds() if again else float("nan")
        ),
        "worst_lateness_s": max(late, default=float("nan")),
    }


def measure(
    shards: int, backlog: int, tasks: int, workers: int, steady: int, window: float
) -> dict[str, Any]:
    from tools.servers.cluster import RedisCluster

    results: dict[str, Any] = {
        "run_at": time.time(),
        "shards": shards,
        "backlog": backlog,
        "tasks": tasks,
        "workers": workers,
    }
    with RedisCluster() as cluster:
        for name, url, is_cluster in (
            ("single", os.environ["DELAYQ_REDIS_URL"], False),
            ("cluster", cluster.url, True),
        ):
            with topology(url, is_cluster, shards):
                rate = move_rate(backlog, shards)
                started = end_to_end.scenario(tasks, 0.0, workers, 120.0, all_due=True)
                results[name] = {
                    "move_ids_per_s": rate,
                    "started_per_s": started["started_per_s"],
                    "p99_ms": started["p99_ms"],
                    "unfinished": started["unfinished"],
                }
        with topology(cluster.url, True, shards):
            results["recovery"] = recovery(steady, window, cluster)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--backlog", type=int, default=60_000)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steady", type=int, default=3_000, help="recovery tasks")
    parser.add_argument("--window", type=float, default=9.0, help="recovery s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    end_to_end.setup(args.db)
    results = measure(
        args.shards, args.backlog, args.tasks, args.workers, args.steady, args.window
    )
    print(json.dumps(results) if args.json else json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
