"""Run every benchmark in one invocation and write the report.

    python -m benchmarks            # full run (~1 h), writes docs/benchmarks.md
    python -m benchmarks --quick    # small N, a few minutes, prints only
    python -m benchmarks --quick --all-peers   # ... with all three PostgreSQL peers

Starts its own redis-server and PostgreSQL on loopback (tools.servers) and
stops them after; every measurement runs in a subprocess of its own (Django is
configured once per process) and every loop in them is bounded in count and
time. Each figure comes with a baseline measured in this same run: raw
redis-py, the ORM written by hand, the task functions called in a plain loop
with no queue (``benchmarks.scenarios.direct_call``), or the peers (Celery, RQ,
Dramatiq, Huey on the same Redis; procrastinate, PgQueuer, django-tasks-db
on the same PostgreSQL; from the ``bench`` dependency group).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.harness.child import REPO_ROOT, cache_bytecode, harness_env, run_json
from benchmarks.harness.report import Plan, machine, render
from tools.servers import PostgresServer, RedisServer

FULL = Plan(
    schedule_single=1_000,
    schedule_bulk=20_000,
    schedule_repeats=4,
    dispatch_tasks=10_000,
    dispatch_backlog=100_000,
    idle_seconds=20.0,
    light=(25, 10.0),
    steady=(1_000, 10.0),
    burst=(20_000, 2.0),
    workers=(1, 2, 4),
    tuned=(4, 4, 16),
    repeats=3,
    sizes=(10_000, 100_000, 1_000_000),
    peers_schedule=20_000,
    time_limit=30.0,
    direct_calls=20_000,
    throughput_tasks=10_000,
    throughput_kinds=("noop", "write_row"),
    rolling=(100, 20.0, 3),
    redis_loss=(1_000_000, 2_000, 20.0, 3),
    flow_control=(10_000, 60.0, 20_000),
    # One round: the changes go task by task (see the section).
    tasks_command=(100_000, 1),
)
QUICK = Plan(
    # A smoke test that every stage and the report still work (CI runs it
    # on every change): the sizes and windows are the least that still give
    # each stage's figures something to be computed from.
    schedule_single=100,
    schedule_bulk=1_000,
    schedule_repeats=2,
    dispatch_tasks=500,
    dispatch_backlog=5_000,
    # Long enough for a lease renewal or two of the idle dispatcher.
    idle_seconds=2.0,
    light=(25, 1.0),
    steady=(500, 1.0),
    burst=(1_000, 1.0),
    workers=(1,),
    tuned=(2, 2, 8),
    repeats=1,
    sizes=(1_000, 5_000),
    peers_schedule=300,
    time_limit=15.0,
    direct_calls=1_000,
    throughput_tasks=300,
    # The kind the target is about; a worker start-up costs seconds here.
    throughput_kinds=("write_row",),
    rolling=(100, 2.0, 1),
    # The headline kind only: CI's runtime stays that of one kind.
    lateness_kinds=("write_row",),
    # R = 50/s over 4 s: four 1 s windows to hold the limit in.
    flow_control=(200, 4.0, 500),
    tasks_command=(100, 1),
)
# The quick run (CI) measures one PostgreSQL peer, procrastinate, whose
# Django integration takes the most machinery to keep working; all three
# add a minute on two cores (--all-peers).
QUICK_PEERS = ("celery", "rq", "dramatiq", "huey", "procrastinate")


def _median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure of ``runs``, and its min and max
    (``<key>_min``, ``<key>_max``): the spread a reader needs to tell a
    machine's mood from a change in the code."""
    summary: dict[str, float] = {}
    for key in runs[0]:
        if isinstance(runs[0][key], int | float):
            values = [run[key] for run in runs]
            summary[key] = statistics.median(values)
            summary[f"{key}_min"] = min(values)
            summary[f"{key}_max"] = max(values)
    return summary


_STARTED = time.monotonic()


def _say(message: str) -> None:
    # One write per line: quick runs call this from several threads. The
    # seconds since the start say which part a slow run spent its time in.
    elapsed = time.monotonic() - _STARTED
    sys.stderr.write(f"benchmarks: [{elapsed:5.0f} s] {message}\n")
    sys.stderr.flush()


def measure(plan: Plan, *, peers: Sequence[str], quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": plan.as_dict(), "started": time.time()}
    with RedisServer() as redis, PostgresServer() as pg:
        env = harness_env(
            DELAYQ_REDIS_URL=redis.url,
            DELAYQ_PG_HOST=pg.host,
            DELAYQ_PG_PORT=str(pg.port),
            DELAYQ_PG_USER=pg.user,
            DELAYQ_PG_NAME=pg.dbname,
        )
        _say("schedule throughput (SQLite, PostgreSQL)")
        results["schedule"] = [
            run_json(
                "benchmarks.scenarios.schedule_rate",
                "--db",
                db,
                "--single",
                str(plan.schedule_single),
                "--bulk",
                str(plan.schedule_bulk),
                "--repeats",
                str(plan.schedule_repeats),
                "--json",
                env=env,
                timeout=1800,
            )
            for db in ("sqlite", "postgres")
        ]
        _say("dispatch: fire lateness, move rate, idle cost")
        results["dispatch"] = run_json(
            "benchmarks.scenarios.dispatch",
            "--json",
            "--tasks",
            str(plan.dispatch_tasks),
            "--window",
            str(plan.steady[1]),
            "--backlog",
            str(plan.dispatch_backlog),
            "--idle-seconds",
            str(plan.idle_seconds),
            "--burst",
            str(plan.burst[0]),
            "--burst-window",
            str(plan.burst[1]),
            env=env,
            timeout=1800,
        )
        results["end_to_end"] = []
        for label, n, window, processes, each, ahead, kind in _scenarios(plan):
            _say(
                f"end to end: {label}, {int(n):,} {kind} tasks, {processes} "
                f"worker(s) x {each} thread(s)"
            )
            argv = [
                "benchmarks.scenarios.end_to_end",
                "--db",
                "postgres",
                "--task",
                kind,
            ]
            argv += ["--tasks", str(int(n)), "--window", str(window)]
            argv += ["--workers", str(processes), "--concurrency", str(each)]
            argv += [] if ahead is None else ["--prefetch", str(ahead)]
            argv += ["--time-limit", str(plan.time_limit), "--json"]
            runs = [run_json(*argv, env=env, timeout=600) for _ in range(plan.repeats)]
            results["end_to_end"].append(
                {
                    "scenario": label,
                    "task": kind,
                    "window_s": window,
                    "prefetch": ahead or 4,
                    **_median_of(runs),
                }
            )
        _throughput(env, plan, results)
        rate, window, runs = plan.rolling
        _say(f"rolling restart: {rate} tasks/s over {window:g} s, {runs} run(s)")
        results["rolling_restart"] = run_json(
            "benchmarks.scenarios.rolling_restart",
            "--db",
            "postgres",
            "--rate",
            str(rate),
            "--window",
            str(window),
            "--runs",
            str(runs),
            "--json",
            env=env,
            timeout=1800,
        )
        backlog, soon, window, runs = plan.redis_loss
        if runs:
            _say(f"redis loss: {soon} due over {window:g} s behind {backlog:,}")
            results["redis_loss"] = run_json(
                "benchmarks.scenarios.redis_loss",
                "--db",
                "postgres",
                "--backlog",
                str(backlog),
                "--soon",
                str(soon),
                "--window",
                str(window),
                "--runs",
                str(runs),
                "--json",
                env=env,
                timeout=1800,
            )
        tasks, window, backlog = plan.flow_control
        if tasks:
            _say(
                f"flow control: concurrency and rate limits, fairness, cost, "
                f"{tasks:,} tasks a part, {plan.repeats} run(s)"
            )
            results["flow_control"] = run_json(
                "benchmarks.scenarios.limits",
                "--runs",
                str(plan.repeats),
                "--tasks",
                str(tasks),
                "--rate-window",
                str(window),
                "--fair-backlog",
                str(backlog),
                "--json",
                env=env,
                timeout=3600,
            )
        rows, rounds = plan.tasks_command
        if rows:
            _say(
                f"delayq_tasks: list, cancel, run-now of {rows:,} rows, {rounds} run(s)"
            )
            results["tasks_command"] = run_json(
                "benchmarks.scenarios.tasks_command",
                "--tasks",
                str(rows),
                "--repeats",
                str(rounds),
                "--json",
                env=env,
                # Two changes of N tasks a round, one transaction each.
                timeout=14_400,
            )
        _say("footprint and growth: " + ", ".join(f"{s:,}" for s in plan.sizes))
        results["footprint"] = run_json(
            "benchmarks.scenarios.footprint",
            "--db",
            "postgres",
            "--sizes",
            *map(str, plan.sizes),
            "--json",
            env=env,
            timeout=3600,
        )
        if not quick:
            _say("periodic schedules: 1,000 every second against plain tasks")
            results["periodic"] = run_json(
                "benchmarks.scenarios.periodic",
                "--db",
                "postgres",
                "--schedules",
                "1000",
                "--runs",
                "3",
                "--json",
                env=env,
                timeout=1800,
            )
            _say("PostgreSQL beside MariaDB: burst, light load, schedule_many()")
            results["databases"] = run_json(
                "benchmarks.scenarios.databases",
                "--runs",
                "3",
                "--json",
                env=env,
                timeout=3600,
            )
            # Six more redis-servers: a full run only, on a quiet machine.
            _say("Redis Cluster against one Redis: move rate, started/s, recovery")
            results["cluster"] = run_json(
                "benchmarks.scenarios.cluster",
                "--db",
                "postgres",
                "--json",
                env=env,
                timeout=1800,
            )
        if peers:
            # The PostgreSQL peers get a fresh database each on this server.
            results["peers"] = _peers(plan, peers, quick, pg.url)
    results["finished"] = time.time()
    return results


#: One end-to-end scenario: label, tasks, window (s), worker processes,
#: threads each, prefetch (None: the default), task kind.
Scenario = tuple[str, float, float, int, int, int | None, str]


def _scenarios(plan: Plan) -> list[Scenario]:
    """The light and steady loads with 2 worker processes for each of the
    plan's lateness kinds (the one-row task first: the headline), then the
    bursts of the one-row task."""
    workers, threads, prefetch = plan.tuned
    light, steady = plan.light, plan.steady
    burst_n, burst_window = plan.burst
    return [
        *(
            scenario
            for kind in plan.lateness_kinds
            for scenario in (
                ("light", light[0] * light[1], light[1], 2, 1, None, kind),
                ("steady", steady[0] * steady[1], steady[1], 2, 1, None, kind),
            )
        ),
        *(
            ("burst", burst_n, burst_window, count, 1, None, "write_row")
            for count in plan.workers
        ),
        ("burst", burst_n, burst_window, workers, threads, prefetch, "write_row"),
    ]


def _throughput(env: dict[str, str], plan: Plan, results: dict[str, Any]) -> None:
    """Started/s per worker process, against the same functions called directly.

    The direct-call loop runs first, on the same PostgreSQL (both task
    kinds: it is quick), then for each of the plan's task kinds (names in
    ``benchmarks.harness.benchapp.tasks``) ``throughput_tasks`` tasks share one due
    time and one worker process (one thread) runs them all.
    """
    _say(f"direct-call baseline: {plan.direct_calls:,} calls of each task kind")
    results["direct_call"] = run_json(
        "benchmarks.scenarios.direct_call",
        "--db",
        "postgres",
        "--calls",
        str(plan.direct_calls),
        "--repeats",
        str(plan.repeats),
        "--json",
        env=env,
        timeout=1800,
    )
    results["throughput"] = []
    n = plan.throughput_tasks
    # Room for a worker as slow as 100 tasks/s before the run gives up.
    limit = max(plan.time_limit, n / 100)
    for kind in plan.throughput_kinds:
        _say(f"end to end: throughput, {n:,} {kind} tasks all due, 1 worker")
        argv = ["benchmarks.scenarios.end_to_end", "--db", "postgres", "--all-due"]
        argv += ["--task", kind, "--tasks", str(n), "--window", "0"]
        argv += ["--workers", "1", "--time-limit", str(limit), "--json"]
        # Throughput runs take long and vary little: one run each.
        run = run_json(*argv, env=env, timeout=600 + limit)
        results["throughput"].append({"task": kind, **run})


def _peers(
    plan: Plan, names: Sequence[str], quick: bool, postgres_url: str
) -> list[dict[str, Any]]:
    """Each peer with its defaults, then (full runs) with its knobs turned.

    A quick run only checks that every peer still runs, so its peers run side
    by side (each on servers or a database of its own); a full run measures
    them one at a time on a quiet machine. Each run is a
    child process of its own (Django is set up once per process).
    """
    from benchmarks.peers.__main__ import CHILD_TIMEOUT_S
    from benchmarks.peers.__main__ import QUICK as PEERS_QUICK
    from benchmarks.peers.child import run_peer_in_child

    def measure_peer(name: str, tuned: bool) -> dict[str, Any]:
        _say(f"peer: {name}{' (tuned)' if tuned else ''}")
        if quick:
            sizes: dict[str, Any] = dict(PEERS_QUICK)  # the peers' smoke test
        else:
            sizes = dict(
                n_schedule=plan.peers_schedule,
                light=plan.light,
                steady=plan.steady,
                burst_n=plan.burst[0],
                burst_window_s=plan.burst[1],
                idle_seconds=plan.idle_seconds,
                memory_n=plan.sizes[0],
                time_limit_s=plan.time_limit,
            )
        return run_peer_in_child(
            name,
            timeout=CHILD_TIMEOUT_S,
            workers=1,
            tuned=tuned,
            postgres_url=postgres_url,
            **sizes,
        )

    if quick:
        # All at once: a quick run only proves each peer still runs, and one
        # slot each keeps the wall time that of the slowest peer (about a
        # minute on two busy cores) rather than of two waves.
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            return list(pool.map(lambda name: measure_peer(name, False), names))
    return [measure_peer(name, tuned) for name in names for tuned in (False, True)]


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="small N, prints only")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers")
    parser.add_argument(
        "--all-peers",
        action="store_true",
        help="with --quick: every peer (default: one of the PostgreSQL peers)",
    )
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        help="write the markdown report here (full run: docs/benchmarks.md)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also save raw JSON")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="render the report from a run saved with --json, measuring nothing",
    )
    args = parser.parse_args()
    if args.from_json:
        report = render(json.loads(args.from_json.read_text()))
        if args.write:
            args.write.write_text(report)
            _say(f"wrote {args.write}")
        else:
            print(report)
        return 0
    plan = QUICK if args.quick else FULL
    # The peers' children inherit this process's environment.
    cache_bytecode(os.environ)
    command = "python -m benchmarks" + (" --quick" if args.quick else "")
    from benchmarks.peers import PEERS

    peers: Sequence[str] = PEERS
    if args.no_peers:
        peers = ()
    elif args.quick and not args.all_peers:
        peers = QUICK_PEERS
    results = measure(plan, peers=peers, quick=args.quick)
    _say("measured")
    results["command"] = command
    # Saved with the figures so that a report rendered later from the JSON
    # still describes the machine the figures came from.
    results["machine"] = machine()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    report = render(results)
    print(report)
    target = args.write or (
        None if args.quick else REPO_ROOT / "docs" / "benchmarks.md"
    )
    if target is not None:
        target.write_text(report)
        _say(f"wrote {target}")
    # A slow peer is a result; one that could not be measured at all is a
    # broken harness, which the quick run in CI must report.
    from benchmarks.peers.__main__ import measured

    broken = [r["peer"] for r in results.get("peers", []) if not measured(r)]
    if broken:
        _say(f"could not measure: {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
