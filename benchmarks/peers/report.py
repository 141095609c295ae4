"""The markdown table of run_peer results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _lateness(summary: dict[str, Any], keys: Sequence[str]) -> str:
    if summary.get("fired") is None:
        return "n/a"
    values = " / ".join(_num(summary[key], 1) for key in keys)
    if summary["fired"] < summary["n"]:
        values += f" ({summary['fired']:,} of {summary['n']:,} fired)"
    return values


def _postgres(result: dict[str, Any]) -> bool:
    return result.get("store") == "postgres"


def _idle(result: dict[str, Any]) -> str:
    """Redis commands per second; for a PostgreSQL peer, transactions."""
    value = _num(result.get("idle_cmds_per_s"), 1)
    return f"{value} xacts" if _postgres(result) and value != "n/a" else value


def _bytes(result: dict[str, Any]) -> str:
    """Redis bytes per task; for a PostgreSQL peer, its tables' bytes."""
    if _postgres(result):
        value = _num(result.get("db_bytes_per_task"))
        return "n/a" if value == "n/a" else f"DB {value}"
    return _num(result.get("redis_bytes_per_task"))


def _mode(result: dict[str, Any]) -> str:
    config = result.get("config") or ""
    return config.split(":", 1)[0] if ":" in config else "?"


def markdown(results: Sequence[dict[str, Any]], header: str) -> str:
    """One row per run, then each run's versions, settings and errors."""
    lines = [
        header,
        "",
        "Lateness = task start - due time, ms, nearest-rank percentiles over the "
        "tasks that fired (time.time() on this one machine). Peers on "
        "PostgreSQL: idle = transactions/s (pg_stat_database), B/task = bytes "
        "of the peer's tables and indexes per task (DB).",
        "",
        "| peer | mode | W | schedule/s (bulk) | light p50 / p90 / p99 / max "
        "| steady p50 / p90 / p99 / max | burst p50 / p99 / max | burst done/s "
        "| idle cmds/s (PG: xacts/s) | B/task (Redis; PG: DB) |",
        "|---|---|---:|---:|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        bulk = r.get("bulk_schedule_per_s")
        schedule = _num(r.get("schedule_per_s"))
        if bulk is not None:
            schedule += f" ({_num(bulk)})"
        burst = r["burst"]
        lines.append(
            f"| {r['peer']} | {_mode(r)} | {r.get('workers', '')} | {schedule} "
            f"| {_lateness(r['light'], ('p50_ms', 'p90_ms', 'p99_ms', 'max_ms'))} "
            f"| {_lateness(r['steady'], ('p50_ms', 'p90_ms', 'p99_ms', 'max_ms'))} "
            f"| {_lateness(burst, ('p50_ms', 'p99_ms', 'max_ms'))} "
            f"| {_num(burst.get('completed_per_s'))} "
            f"| {_idle(r)} | {_bytes(r)} |"
        )
    lines.append("")
    for r in results:
        load = r.get("load_avg_1m")
        load_text = f"; load avg {load[0]} -> {load[1]}" if load else ""
        lines.append(f"- **{r['peer']}** {r.get('version') or ''}{load_text}")
        lines.append(f"  - {r.get('config') or 'not configured (see errors)'}")
        for error in r.get("errors", []):
            first_line = error.splitlines()[0] if error else error
            lines.append(f"  - error: {first_line}")
    return "\n".join(lines)
