"""The peer benchmark's statistics: nearest-rank percentiles, repeats, rates."""

from __future__ import annotations

import pytest

from benchmarks.peers.stats import (
    Sample,
    completed_per_s,
    dedupe,
    empty_summary,
    nearest_rank,
    parse_sample,
    summarise,
)


def test_nearest_rank_returns_a_value_from_the_samples_never_an_interpolation():
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert nearest_rank(values, 30) == 20.0
    assert nearest_rank(values, 40) == 20.0
    assert nearest_rank(values, 50) == 35.0
    assert nearest_rank(values, 100) == 50.0


def test_nearest_rank_sorts_its_input():
    assert nearest_rank([9.0, 1.0, 5.0, 3.0], 50) == 3.0


def test_nearest_rank_p99_of_100_values_is_the_99th_not_the_100th():
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 99) == 99.0
    assert nearest_rank(values, 50) == 50.0
    assert nearest_rank(values, 90) == 90.0


def test_nearest_rank_of_one_value_is_that_value_at_every_percentile():
    assert nearest_rank([7.0], 1) == 7.0
    assert nearest_rank([7.0], 99) == 7.0


def test_nearest_rank_of_no_samples_is_none():
    assert nearest_rank([], 50) is None


@pytest.mark.parametrize("bad", [0, -1, 100.5])
def test_nearest_rank_rejects_a_percentile_outside_0_to_100(bad):
    with pytest.raises(ValueError, match="percentile must be in"):
        nearest_rank([1.0], bad)


def test_summarise_reports_lateness_in_ms_and_how_many_of_n_fired():
    samples = [
        Sample(i, 100.0, 100.0 + late / 1000) for i, late in enumerate([3, 1, 2])
    ]
    summary = summarise(5, samples)
    assert summary["n"] == 5
    assert summary["fired"] == 3
    assert summary["p50_ms"] == pytest.approx(2.0)
    assert summary["p90_ms"] == pytest.approx(3.0)
    assert summary["max_ms"] == pytest.approx(3.0)


def test_summarise_keeps_early_starts_negative():
    summary = summarise(1, [Sample(0, 100.0, 99.998)])
    assert summary["max_ms"] == pytest.approx(-2.0)


def test_summary_of_nothing_fired_has_none_values_and_zero_fired():
    summary = summarise(4, [])
    assert summary == {
        "n": 4,
        "fired": 0,
        "p50_ms": None,
        "p90_ms": None,
        "p99_ms": None,
        "max_ms": None,
    }


def test_a_scenario_that_could_not_run_has_no_fired_count():
    assert empty_summary(3)["fired"] is None
    assert empty_summary(3)["p99_ms"] is None


def test_dedupe_keeps_each_tasks_earliest_start_and_counts_repeats():
    samples = [Sample(0, 1.0, 2.0), Sample(1, 1.0, 1.5), Sample(0, 1.0, 1.2)]
    kept, repeats = dedupe(samples)
    assert repeats == 1
    assert sorted((s.index, s.started) for s in kept) == [(0, 1.2), (1, 1.5)]


def test_completed_per_s_counts_from_the_first_due_time_to_the_last_start():
    samples = [Sample(i, 10.0, 10.0 + i * 0.5) for i in range(5)]  # last at 12.0
    assert completed_per_s(samples, first_due=10.0) == pytest.approx(2.5)


def test_completed_per_s_is_none_without_samples_or_a_positive_span():
    assert completed_per_s([], first_due=10.0) is None
    assert completed_per_s([Sample(0, 10.0, 9.0)], first_due=10.0) is None


def test_parse_sample_reads_what_the_task_records():
    sample = parse_sample(b"12 1700000000.25 1700000000.5")
    assert sample == Sample(12, 1700000000.25, 1700000000.5)
    assert sample.lateness_ms == pytest.approx(250.0)
