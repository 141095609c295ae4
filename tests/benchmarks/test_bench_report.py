"""The benchmark reports' pure parts: the peers' table cells, and ratios."""

from __future__ import annotations

from typing import Any

from benchmarks.harness.report import _ratio
from benchmarks.peers.report import markdown
from benchmarks.peers.stats import empty_summary


def _result(**figures: Any) -> dict[str, Any]:
    return {
        "peer": "p",
        "version": "p 1.0",
        "config": "defaults: ...",
        "workers": 1,
        "schedule_per_s": 1000.0,
        "bulk_schedule_per_s": None,
        "light": empty_summary(10),
        "steady": empty_summary(10),
        "burst": {**empty_summary(10), "completed_per_s": None},
        "idle_cmds_per_s": 2.0,
        "redis_bytes_per_task": None,
        "db_bytes_per_task": None,
        "errors": [],
        **figures,
    }


def _row(result: dict[str, Any]) -> list[str]:
    line = markdown([result], "header").splitlines()[6]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_redis_peer_shows_commands_and_redis_bytes():
    cells = _row(_result(store="redis", redis_bytes_per_task=178.0))
    assert cells[-2:] == ["2.0", "178"]


def test_a_postgres_peer_shows_transactions_and_database_bytes():
    cells = _row(_result(store="postgres", db_bytes_per_task=412.4))
    assert cells[-2:] == ["2.0 xacts", "DB 412"]


def test_a_postgres_peer_without_figures_shows_n_a():
    cells = _row(_result(store="postgres", idle_cmds_per_s=None))
    assert cells[-2:] == ["n/a", "n/a"]


def test_a_result_from_before_stores_existed_reads_as_redis():
    result = _result(redis_bytes_per_task=100.0)
    del result["db_bytes_per_task"]
    assert _row(result)[-2:] == ["2.0", "100"]


def test_ratio_has_two_decimals():
    assert _ratio(250.0, 2_500.0) == "0.10x"
    assert _ratio(1_300.0, 2_500.0) == "0.52x"


def test_a_ratio_below_a_hundredth_reads_as_a_fraction():
    assert _ratio(277.0, 2_846_902.0) == "1/10,278"


def test_ratio_without_a_figure_is_n_a():
    assert _ratio(1.0, 0.0) == "n/a"
    assert _ratio(0.0, 10.0) == "n/a"


def test_the_periodic_section_shows_both_scenarios_and_the_cost_per_schedule():
    from benchmarks.harness.report import _periodic

    def spread(median: float) -> dict[str, float]:
        return {"median": median, "min": median - 1, "max": median + 1}

    figures = ("n", "fired", "p50_ms", "p99_ms", "redis_cmds_per_s")
    run: dict[str, Any] = {
        "schedules": 1000,
        "workers": 2,
        "window_s": 10.0,
        "runs": [{}, {}, {}],
        **{f"periodic_{f}": spread(100.0) for f in figures},
        **{f"plain_{f}": spread(50.0) for f in figures},
        "periodic_db_rows_per_s": spread(3000.0),
        "plain_db_rows_per_s": spread(2000.0),
        "periodic_db_commits_per_s": spread(48.0),
        "plain_db_commits_per_s": spread(42.0),
        "per_schedule_redis_cmds_per_s": spread(0.012),
        "per_schedule_db_rows_per_s": spread(1.27),
        "per_schedule_db_commits_per_s": spread(0.006),
    }
    lines = _periodic({"periodic": run})
    assert (
        lines[0] == "## Periodic schedules: 1,000 schedules every second (PostgreSQL)"
    )
    table = [line for line in lines if line.startswith("| 1,000 schedules")]
    assert table == [
        "| 1,000 schedules, every 1 s | 100 (99-101) of 100 (99-101) | 100.0 "
        "(99.0-101.0) | 100.0 (99.0-101.0) | 100 (99-101) | 3,000 (2,999-3,001) "
        "| 48 (47-49) |"
    ]
    assert "0.012 Redis commands, 1.27 rows written and 0.006 commits" in lines[-2]
    assert _periodic({}) == []


def test_the_mariadb_burst_target_is_judged_on_the_median_ratio():
    from benchmarks.harness.report import _mariadb_burst

    def row(goal: str, measured: str, met: bool) -> str:
        return f"{measured} | {'met' if met else 'missed'}"

    def figures(ratio: float) -> dict[str, Any]:
        return {
            "databases": {
                "mariadb": {
                    "burst_ratio": ratio,
                    "burst_ratio_min": 0.5,
                    "burst_ratio_max": 1.9,
                    "started_per_s": 1473.0,
                    "direct_per_s": 1601.0,
                }
            }
        }

    assert _mariadb_burst(figures(0.92), row) == [
        "0.92x (0.50-1.90x; 1,473 started/s, direct calls 1,601/s) | met"
    ]
    assert _mariadb_burst(figures(0.79), row)[0].endswith("| missed")
    # A run without the databases' benchmark has no such row.
    assert _mariadb_burst({}, row) == []


def test_the_tasks_command_section_says_whether_memory_stayed_bounded():
    from benchmarks.harness.report import _tasks_command

    def spread(median: float) -> dict[str, float]:
        return {"median": median, "min": median - 1, "max": median + 1}

    def action(rss: float, small_rss: float) -> dict[str, Any]:
        return {
            "rows_per_s": spread(600.0),
            "baseline_rows_per_s": spread(24000.0),
            "rss_mib": spread(rss),
            "small_rss_mib": spread(small_rss),
        }

    run: dict[str, Any] = {
        "n": 100_000,
        "small_n": 10_000,
        "batch": 500,
        "repeats": 3,
        "startup_s": 2.5,
        "startup_rss_mib": 68.0,
        "list": action(71.1, 71.0),
        "cancel": action(70.5, 70.4),
    }
    lines = _tasks_command({"tasks_command": run})
    assert lines[0] == "## `manage.py delayq_tasks` over many rows (PostgreSQL)"
    rows = [line for line in lines if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| `list --json`",
        "| `cancel --yes`",
    ]
    assert "600 (599-601)" in rows[1]
    assert "bounded, the command holds 500 rows at a time" in "\n".join(lines)

    run["cancel"] = action(170.5, 70.4)
    assert "**it grows with the rows**" in "\n".join(
        _tasks_command({"tasks_command": run})
    )
    assert _tasks_command({}) == []
