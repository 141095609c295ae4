"""Run the peer delay queues side by side and print a markdown table.

    python -m benchmarks.peers --quick            # small N, defaults only
    python -m benchmarks.peers                    # full N, defaults and tuned
    python -m benchmarks.peers --peers rq,huey --workers 1,2 --json out.json
    python -m benchmarks.peers --peers procrastinate,pgqueuer,django-tasks-db

Each peer gets fresh private redis-servers (tools.servers): the measured one
and the recorder its tasks report to; the PostgreSQL peers get a fresh
database on one private PostgreSQL instead of the measured redis-server.
Each run is a child process of its own (Django is set up once per process).
Every wait is bounded; a peer that does not keep up is reported as "k of N
fired within T s".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import PEERS, POSTGRES_PEERS
from benchmarks.peers.child import LOG_LEVEL_ENV, run_peer_in_child
from benchmarks.peers.report import markdown
from tools.servers import PostgresServer

FULL: dict[str, Any] = {
    "n_schedule": 20_000,
    "light": (25.0, 10.0),
    "steady": (1000.0, 10.0),
    "burst_n": 20_000,
    "burst_window_s": 2.0,
    "idle_seconds": 20.0,
    "memory_n": 20_000,
    "time_limit_s": 30.0,
    "delay_s": 2.0,
}
# Every step of a run is bounded; this bounds a child that hangs regardless.
CHILD_TIMEOUT_S = 1800.0

QUICK: dict[str, Any] = {
    "n_schedule": 300,
    "light": (20.0, 1.0),
    "steady": (200.0, 1.0),
    "burst_n": 500,
    "burst_window_s": 0.5,
    "idle_seconds": 1.0,
    "memory_n": 500,
    "time_limit_s": 3.0,
    "delay_s": 1.0,
}


def _pair(text: str) -> tuple[float, float]:
    try:
        rate, seconds = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RATE,SECONDS such as 25,10; got {text!r}"
        ) from None
    if rate <= 0 or seconds <= 0:
        raise argparse.ArgumentTypeError(f"RATE and SECONDS must be > 0; got {text!r}")
    return rate, seconds


def _names(allowed: list[str]) -> Any:
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(allowed)} (comma-separated); got {text!r}"
            )
        return names

    return parse


def _workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"expected worker counts >= 1 such as 1,2,4; got {text!r}"
        )
    return counts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description="Celery, RQ, Dramatiq and Huey delays on the same Redis; "
        "procrastinate, PgQueuer and django-tasks-db on the same PostgreSQL.",
    )
    parser.add_argument("--quick", action="store_true", help="small N (a CI smoke run)")
    parser.add_argument(
        "--peers", type=_names(PEERS), default=PEERS, help="default: all"
    )
    parser.add_argument(
        "--modes",
        type=_names(["defaults", "tuned"]),
        default=None,
        help="defaults,tuned (default: both; --quick: defaults)",
    )
    parser.add_argument(
        "--workers", type=_workers, default=[1], help="worker process counts, e.g. 1,2"
    )
    parser.add_argument("--n-schedule", type=int, help="single calls timed")
    parser.add_argument("--light", type=_pair, help="RATE,SECONDS")
    parser.add_argument("--steady", type=_pair, help="RATE,SECONDS")
    parser.add_argument("--burst-n", type=int, help="tasks due in the burst window")
    parser.add_argument("--burst-window", type=float, dest="burst_window_s")
    parser.add_argument("--idle-seconds", type=float)
    parser.add_argument("--memory-n", type=int)
    parser.add_argument("--time-limit", type=float, dest="time_limit_s")
    parser.add_argument(
        "--delay", type=float, dest="delay_s", help="light/steady delay"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--log-dir", type=Path, help="keep the workers' logs here")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    if args.verbose:
        os.environ[LOG_LEVEL_ENV] = "INFO"  # the children's logs too
    params = dict(QUICK if args.quick else FULL)
    for key in params:
        value = getattr(args, key, None)
        if value is not None:
            params[key] = value
    modes = args.modes or (["defaults"] if args.quick else ["defaults", "tuned"])
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    stack = contextlib.ExitStack()
    postgres_url = None
    if set(args.peers) & set(POSTGRES_PEERS):
        postgres_url = stack.enter_context(PostgresServer()).url
    with stack:
        _run_all(args, params, modes, postgres_url, results)
    took = time.monotonic() - started
    header = (
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{'quick' if args.quick else 'full'} mode, {took:.0f} s; "
        f"params: {json.dumps(params)}"
    )
    print(markdown(results, header))
    if args.json:
        args.json.write_text(
            json.dumps({"header": header, "results": results}, indent=2)
        )
    # A peer that is slow is a result; a peer that could not be measured at
    # all (no client, no workers) is a broken harness, which CI must see.
    broken = [r["peer"] for r in results if not measured(r)]
    if broken:
        print(f"could not measure: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


def _run_all(
    args: argparse.Namespace,
    params: dict[str, Any],
    modes: list[str],
    postgres_url: str | None,
    results: list[dict[str, Any]],
) -> None:
    for peer in args.peers:
        for mode in modes:
            for workers in args.workers:
                print(f"running {peer} ({mode}, W={workers}) ...", file=sys.stderr)
                log_dir = (
                    args.log_dir / f"{peer}-{mode}-w{workers}" if args.log_dir else None
                )
                load_before = os.getloadavg()[0]
                result = run_peer_in_child(
                    peer,
                    timeout=CHILD_TIMEOUT_S,
                    workers=workers,
                    tuned=mode == "tuned",
                    log_dir=log_dir,
                    postgres_url=postgres_url,
                    **params,
                )
                result["workers"] = workers
                result["load_avg_1m"] = [
                    round(load_before, 2),
                    round(os.getloadavg()[0], 2),
                ]
                results.append(result)


def measured(result: dict[str, Any]) -> bool:
    """True if every figure of the run was taken (slow or not)."""
    scenarios = (result["light"], result["steady"], result["burst"])
    return result["schedule_per_s"] is not None and all(
        s["fired"] is not None for s in scenarios
    )


if __name__ == "__main__":
    sys.exit(main())
