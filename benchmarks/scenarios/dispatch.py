"""Dispatch benchmarks: fire lateness, move rate, idle cost.

* lateness: N task ids are indexed with due times spread over a window; a
  running dispatcher moves them. Each ready-stream entry id carries Redis'
  clock at the move, so lateness = entry time - due time, on one clock.
* move rate: a backlog of due ids is moved by ``Dispatcher.run(once=True)``;
  baseline: the same Lua script (ZRANGEBYSCORE + ZREM + XADD, 1,000 ids per
  call) in a plain redis-py loop, on the same Redis, in the same run.
* idle: Redis commands per second while a dispatcher (and a worker) wait
  with nothing due, read from INFO's total_commands_processed.

    python -m tools.servers run --redis -- python -m benchmarks.scenarios.dispatch

Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid

from benchmarks.harness.stats import percentile


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.harness.settings")
    import django

    django.setup()


def lateness(n: int, window: float, lead: float = 1.0) -> dict[str, float]:
    import redis

    from django_delayq.dispatcher import Dispatcher
    from django_delayq.store.index import IndexEntry, add
    from django_delayq.store.keys import decode_member

    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])
    client.flushall()
    dispatcher = Dispatcher(queues=["default"])
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    time.sleep(0.5)  # leases taken, listener blocking
    start_ms = int(client.time()[0] * 1000 + client.time()[1] // 1000)
    first = start_ms + int(lead * 1000)
    scores = {}
    entries = []
    for i in range(n):
        task_id = uuid.uuid4()
        score = first + int(i * window * 1000 / n)
        scores[task_id] = score
        entries.append(IndexEntry(task_id, "default", 0, score))
    for chunk in range(0, n, 1000):
        add(entries[chunk : chunk + 1000], client)
    deadline = time.monotonic() + lead + window + 30
    stream = "delayq:{default:0}:ready"
    while client.xlen(stream) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    dispatcher.stop()
    thread.join(timeout=30)
    late = []
    for entry_id, fields in client.xrange(stream):
        moved_ms = int(entry_id.split(b"-")[0])
        late.append(moved_ms - scores[decode_member(fields[b"id"])])
    assert len(late) == n, f"only {len(late)} of {n} moved"
    assert min(late) >= 0, "a task was moved before it was due"
    return {
        "p50": percentile(late, 0.50),
        "p90": percentile(late, 0.90),
        "p99": percentile(late, 0.99),
        "max": max(late),
    }


def move_rate(n: int, repeats: int) -> tuple[float, float]:
    import redis

    from django_delayq.dispatcher import Dispatcher
    from django_delayq.store import scripts

    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])
    due, ready = "delayq:{default:0}:due", "delayq:{default:0}:ready"

    def load_backlog() -> None:
        client.flushall()
        # A pass on the empty Redis first, as a running system has made:
        # on a Redis without its index marker the first move rebuilds the
        # index from the rows (reading the whole ready stream), which is
        # recovery from a loss, not the moving measured here.
        Dispatcher(queues=["default"]).run(once=True)
        pipe = client.pipeline(transaction=False)
        for start in range(0, n, 1000):
            pipe.zadd(
                due, {uuid.uuid4().bytes: 1000 + i for i in range(start, start + 1000)}
            )
        pipe.execute()

    # The baseline: the same move, without leases or a fence, in a bare loop.
    baseline_lua = client.register_script(
        """
        local ids = redis.call(
          'ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
        for i = 1, #ids do redis.call('XADD', KEYS[2], '*', 'id', ids[i]) end
        if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
        return #ids
        """
    )
    ours, base = [], []
    for _ in range(repeats):
        load_backlog()
        started = time.perf_counter()
        moved = 0
        while True:
            got = baseline_lua(keys=[due, ready], args=[int(time.time() * 1000)])
            moved += got
            if got < 1000:
                break
        base.append(moved / (time.perf_counter() - started))
        load_backlog()
        started = time.perf_counter()
        stats = Dispatcher(queues=["default"], batch_size=1000).run(once=True)
        ours.append(stats.moved / (time.perf_counter() - started))
        assert stats.moved == n
    del scripts
    return statistics.median(ours), statistics.median(base)


def idle_commands(seconds: float) -> dict[str, float]:
    import redis

    from django_delayq.dispatcher import Dispatcher
    from django_delayq.worker import Worker

    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])
    client.flushall()
    results: dict[str, float] = {}
    for label in ("dispatcher", "worker"):
        loop = Dispatcher() if label == "dispatcher" else Worker()
        thread = threading.Thread(target=loop.run, daemon=True)
        thread.start()
        time.sleep(3)  # past start-up (leases, groups)
        client.config_resetstat()
        before = int(client.info("stats")["total_commands_processed"])
        time.sleep(seconds)
        after = int(client.info("stats")["total_commands_processed"])
        loop.stop()
        thread.join(timeout=30)
        # One INFO of ours is counted in the delta.
        results[label] = (after - before - 1) / seconds
        stats = client.info("commandstats")
        results[label + " round trips"] = sum(
            stats.get(f"cmdstat_{name}", {}).get("calls", 0)
            for name in ("evalsha", "blpop", "xreadgroup", "xautoclaim", "exists")
        )
        client.config_resetstat()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="django-delayq dispatch benchmarks")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--burst", type=int, default=20_000, help="tasks in a burst")
    parser.add_argument("--burst-window", type=float, default=2.0, help="seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    setup()
    if args.json:
        steady = lateness(args.tasks, args.window)
        light = lateness(max(25, int(25 * args.window)), args.window)
        burst = lateness(args.burst, args.burst_window)
        ours, base = move_rate(args.backlog, args.repeats)
        idle = idle_commands(args.idle_seconds)
        print(
            json.dumps(
                {
                    "steady": {"n": args.tasks, "window_s": args.window, **steady},
                    "light": {"n": max(25, int(25 * args.window)), **light},
                    "burst": {
                        "n": args.burst,
                        "window_s": args.burst_window,
                        **burst,
                    },
                    "move_rate": ours,
                    "move_rate_baseline": base,
                    "idle_dispatcher_cmds_per_s": idle["dispatcher"],
                    "idle_worker_cmds_per_s": idle["worker"],
                }
            )
        )
        return 0
    import redis

    version = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"]).info()[
        "redis_version"
    ]
    print(f"Redis {version}, Python {sys.version.split()[0]}\n")

    late = lateness(args.tasks, args.window)
    rate = args.tasks / args.window
    print(
        f"| fire lateness, {args.tasks:,} due over {args.window:.0f} s ({rate:,.0f}/s) "
        "| p50 ms | p99 ms | max ms |"
    )
    print("|---|---:|---:|---:|")
    print(
        f"| dispatcher (Redis clock: move time - due time) "
        f"| {late['p50']:.0f} | {late['p99']:.0f} | {late['max']:.0f} |"
    )

    light = lateness(250, 10.0)
    print(
        f"| light load, 250 due over 10 s (25/s) "
        f"| {light['p50']:.0f} | {light['p99']:.0f} | {light['max']:.0f} |\n"
    )

    ours, base = move_rate(args.backlog, args.repeats)
    print(f"| move rate, {args.backlog:,} due ids, batches of 1,000 | ids/s |")
    print("|---|---:|")
    print(f"| raw redis-py Lua loop (baseline) | {base:,.0f} |")
    print(f"| delayq_dispatch --once | {ours:,.0f} ({ours / base:.2f}x) |\n")

    idle = idle_commands(args.idle_seconds)
    print(
        f"| idle for {args.idle_seconds:.0f} s, one queue of one shard "
        "| commands/s (incl. inside scripts) | round trips/s |"
    )
    print("|---|---:|---:|")
    for label in ("dispatcher", "worker"):
        trips = idle[label + " round trips"] / args.idle_seconds
        print(f"| one {label} | {idle[label]:.2f} | {trips:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
