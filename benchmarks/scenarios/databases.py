"""PostgreSQL beside MariaDB: the same scenarios on each, in the same run.

For each database, ``--runs`` times, on fresh servers each time and the two
databases taking turns (so that the machine's mood falls on both alike):

* the burst: ``--burst`` one-row tasks all due within 2 s, two worker
  processes, started per second, against the direct-call loop of the same
  function on the same database (``benchmarks.scenarios.direct_call``);
* the light load: 25 one-row tasks a second for 10 s, start lateness;
* ``schedule_many()``: tasks per second in batches of 1,000, against the
  hand-written ``bulk_create()`` and pipelined ``ZADD``
  (``benchmarks.scenarios.schedule_rate``).

    python -m benchmarks.scenarios.databases --runs 3

Prints one JSON object (``--json``) or a table: medians, with the spread
(min-max) of the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from benchmarks.harness.child import harness_env, run_json

DATABASES = ("postgres", "mariadb")


def _on_fresh_servers(db: str, *argv: str, timeout: float = 900) -> Any:
    """``python -m <argv>`` with a fresh Redis and a fresh ``db`` server;
    the JSON its last stdout line holds."""
    servers = ("tools.servers", "run", "--redis", f"--{db}", "--")
    return run_json(
        *servers,
        sys.executable,
        "-m",
        *argv,
        env=harness_env(),
        timeout=timeout,
        quiet=True,
    )


def _one_row_tasks(db: str, tasks: int, *, window: float) -> Any:
    """``tasks`` one-row tasks due over ``window`` seconds, two workers."""
    return _on_fresh_servers(
        db,
        "benchmarks.scenarios.end_to_end",
        "--db",
        db,
        "--task",
        "write_row",
        "--tasks",
        str(tasks),
        "--window",
        str(window),
        "--workers",
        "2",
        "--json",
    )


def one_round(db: str, burst: int, schedule_bulk: int) -> dict[str, float]:
    direct = _on_fresh_servers(
        db,
        "benchmarks.scenarios.direct_call",
        "--db",
        db,
        "--calls",
        str(burst),
        "--json",
    )
    flow = _one_row_tasks(db, burst, window=2)
    light = _one_row_tasks(db, 250, window=10)
    rates = {
        row["what"]: row
        for row in _on_fresh_servers(
            db,
            "benchmarks.scenarios.schedule_rate",
            "--db",
            db,
            "--single",
            "200",
            "--bulk",
            str(schedule_bulk),
            "--repeats",
            "2",
            "--json",
        )
    }
    bulk = next(row for what, row in rates.items() if "bulk" in what)
    return {
        "direct_per_s": direct["write_row_calls_per_s"],
        "started_per_s": flow["started_per_s"],
        "burst_ratio": flow["started_per_s"] / direct["write_row_calls_per_s"],
        "light_p50_ms": light["p50_ms"],
        "light_p99_ms": light["p99_ms"],
        "schedule_many_per_s": bulk["ours"],
        "schedule_baseline_per_s": bulk["baseline"],
        "load": flow["load_before"],
    }


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {"runs": len(runs)}
    for key in runs[0]:
        values = [run[key] for run in runs]
        out[key] = statistics.median(values)
        out[f"{key}_min"], out[f"{key}_max"] = min(values), max(values)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burst", type=int, default=20_000, help="tasks")
    parser.add_argument("--schedule-bulk", type=int, default=20_000, help="tasks")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {db: [] for db in DATABASES}
    for _ in range(args.runs):
        for db in DATABASES:
            runs[db].append(one_round(db, args.burst, args.schedule_bulk))
    results = {db: summary(found) for db, found in runs.items()}
    if args.json:
        print(json.dumps(results))
        return 0
    for db, row in results.items():
        print(
            f"{db}: burst {row['started_per_s']:,.0f} started/s "
            f"({row['started_per_s_min']:,.0f}-{row['started_per_s_max']:,.0f}) "
            f"vs direct {row['direct_per_s']:,.0f}/s "
            f"({row['direct_per_s_min']:,.0f}-{row['direct_per_s_max']:,.0f}): "
            f"{row['burst_ratio']:.2f}x ({row['burst_ratio_min']:.2f}-"
            f"{row['burst_ratio_max']:.2f}); light p50 {row['light_p50_ms']:.1f} ms, "
            f"p99 {row['light_p99_ms']:.1f} ms "
            f"({row['light_p99_ms_min']:.1f}-{row['light_p99_ms_max']:.1f}); "
            f"schedule_many {row['schedule_many_per_s']:,.0f}/s vs by hand "
            f"{row['schedule_baseline_per_s']:,.0f}/s; {row['runs']:.0f} runs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
