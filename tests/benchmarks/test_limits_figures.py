"""The flow-control benchmark's figures (benchmarks/scenarios/limits.py),
and its section of the report: pure functions, no server."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks.harness.report import _flow_control, _flow_control_targets
from benchmarks.scenarios.limits import (
    allowed_delays,
    max_overlap,
    mean_running,
    summary,
    tightest_span,
    utilisation,
    window_max,
)


def test_overlap_counts_the_runs_open_at_one_moment():
    assert max_overlap([]) == 0
    assert max_overlap([(0.0, 1.0)]) == 1
    assert max_overlap([(0.0, 2.0), (1.0, 3.0), (1.5, 1.6), (4.0, 5.0)]) == 3


def test_a_run_that_starts_as_another_ends_does_not_overlap_it():
    assert max_overlap([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) == 1


def test_mean_running_weighs_each_run_by_its_time_within_the_span():
    runs = [(0.0, 1.0), (0.0, 0.5), (3.0, 5.0)]
    # Over [0, 4]: 1 + 0.5 + 1 (the last, cut at 4) run-seconds.
    assert mean_running(runs, 0.0, 4.0) == pytest.approx(2.5 / 4)
    assert utilisation(runs, 2, 0.0, 4.0) == pytest.approx(2.5 / 8)


def test_slots_always_full_is_a_utilisation_of_one():
    back_to_back = [(i * 0.1, (i + 1) * 0.1) for i in range(10)]
    assert utilisation(back_to_back, 1, 0.0, 1.0) == pytest.approx(1.0)


def test_an_empty_span_has_no_utilisation():
    assert math.isnan(mean_running([(0.0, 1.0)], 1.0, 1.0))


def test_the_window_counts_starts_in_a_half_open_second():
    assert window_max([]) == 0
    # 0.0 and 1.0 are a second apart: never in one window [t, t + 1).
    assert window_max([0.0, 0.5, 0.99, 1.0]) == 3
    assert window_max([0.0, 1.0, 2.0, 3.0]) == 1
    assert window_max([5.0, 0.2, 0.1, 0.3], width=0.15) == 2  # unsorted


def test_the_tightest_span_of_r_plus_one_starts():
    starts = [0.0, 0.4, 1.0, 1.1, 2.5]
    assert tightest_span(starts, 2) == pytest.approx(0.1)
    assert tightest_span(starts, 3) == pytest.approx(0.7)
    assert tightest_span(starts, 6) == math.inf


def test_a_start_is_late_from_its_due_time_or_its_keys_previous_end():
    runs = [
        (0.0, 0.010, 0.020),  # due at 0: 10 ms
        (0.005, 0.030, 0.040),  # waited for the first to end at 20 ms: 10 ms
        (1.000, 1.002, 1.003),  # due after the previous ended: 2 ms
    ]
    delays = allowed_delays(list(reversed(runs)))  # taken in start order
    assert delays == pytest.approx([0.010, 0.010, 0.002])


def test_the_summary_keeps_medians_and_the_spread():
    found = summary(
        [{"limit": 1, "most": 1, "u": 0.5}, {"limit": 1, "most": 2, "u": 0.7}]
    )
    assert found["runs"] == 2
    assert found["most_max"] == 2
    assert found["u"] == pytest.approx(0.6)
    assert (found["u_min"], found["u_max"]) == (0.5, 0.7)


def _figures(**values: float) -> dict[str, float]:
    out: dict[str, float] = {"runs": 1}
    for key, value in values.items():
        out[key] = out[f"{key}_min"] = out[f"{key}_max"] = value
    return out


def _run() -> dict[str, Any]:
    at_once = [
        _figures(
            limit=limit,
            tasks=500,
            ran=500,
            most_at_once=limit,
            utilisation=0.5,
            slot_utilisation=1.0,
            started_per_s=100.0 * limit,
            function_ms=1.0,
            cycle_ms=10.0,
        )
        for limit in (1, 5)
    ]
    return {
        "runs": 1,
        "workers": 2,
        "threads": 8,
        "tasks": 500,
        "rate_window_s": 10.0,
        "fair_gap_s": 0.25,
        "at_once": at_once,
        "rate": _figures(
            rate=50,
            offered_per_s=150,
            most_in_a_second=51,
            tightest_ms=990.0,
            achieved_per_s=50.0,
            achieved_ratio=1.0,
        ),
        "fairness": _figures(
            backlog=2000,
            keyed=20,
            b_p50_ms=10.0,
            b_p99_ms=30.0,
            a_per_s=100.0,
            a_waiting_after=1000,
            most_at_once_a=1,
            most_at_once_b=1,
        ),
        "cost": _figures(
            tasks=500,
            baseline_per_s=400.0,
            unlimited_per_s=396.0,
            wide_open_per_s=100.0,
            unlimited_ratio=0.99,
            wide_open_ratio=0.25,
            left_baseline=0,
            left_unlimited=0,
            left_wide_open=0,
            wide_open_admitted_per_task=1.9,
        ),
    }


def _row(goal: str, measured: str, met: bool) -> str:
    return f"{goal}|{measured}|{met}"


def test_a_run_without_the_scenario_renders_nothing():
    assert _flow_control({}) == []
    assert _flow_control_targets({}, _row) == []


def test_the_section_shows_each_limit_and_the_cost():
    text = "\n".join(_flow_control({"flow_control": _run()}))
    assert "| `concurrency_limit=5` | 500 | 500 | 5 | 0.500 | 1.000 | 500 |" in text
    assert "at most **51** function starts" in text
    assert "0.25x the unlimited" in text
    assert "Admissions per task under those limits: 1.90" in text


def test_the_targets_judge_the_worst_run_and_the_medians():
    rows = dict.fromkeys(_flow_control_targets({"flow_control": _run()}, _row))
    met = [row.rsplit("|", 1)[1] for row in rows]
    # Limits held; utilisation 0.5 < 0.95; 51 starts in a second; cost
    # 0.99 >= 0.97; never-binding limits 0.25 < 0.9.
    assert met == ["True", "False", "False", "True", "False"]
