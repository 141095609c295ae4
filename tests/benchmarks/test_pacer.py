"""How a worker sizes its groups, and which tasks it runs alone."""

from __future__ import annotations

from django_delayq.worker.group_commit import Pacer


def test_a_task_past_the_budget_runs_alone_for_a_while():
    pacer = Pacer(budget=0.02)
    for _ in range(4):
        pacer.note_runs([("orders.cancel", 0.001)])  # 1 ms a task here
    for _ in range(3):
        pacer.note_runs([("reports.build", 0.2)])
    assert "reports.build" in pacer.slow
    pacer.note_runs([("orders.cancel", 0.001)])
    assert "orders.cancel" not in pacer.slow


def test_a_long_run_now_and_then_is_not_slowness():
    """A thread that lost the CPU (or waited for the GIL) in the middle of a
    1 ms task: long once, not run after run."""
    pacer = Pacer(budget=0.02)
    for _ in range(20):
        pacer.note_runs([("orders.cancel", 0.001)] * 9 + [("orders.cancel", 0.05)])
    assert pacer.slow == {}


def test_tasks_slowed_down_together_are_not_sent_to_run_alone():
    """Threads sharing the GIL under a sudden load: every task of a group
    takes 30 ms of wall time, past the budget, but no longer than its
    neighbours do."""
    pacer = Pacer(budget=0.02)
    pacer.note_runs([("orders.cancel", 0.001)] * 4)
    pacer.note_runs([("orders.cancel", 0.03), ("orders.cancel", 0.035)] * 3)
    assert pacer.slow == {}
    # One that takes far longer than its neighbours, run after run, is.
    for _ in range(3):
        pacer.note_runs([("orders.cancel", 0.03), ("reports.build", 0.5)])
    assert set(pacer.slow) == {"reports.build"}


def test_the_group_size_follows_what_tasks_cost():
    pacer = Pacer(budget=0.02, max_size=50)
    assert pacer.size() == 8  # nothing measured yet
    pacer.note_runs([("orders.cancel", 0.0005)])  # 0.5 ms a task
    assert pacer.size() == 40
    for _ in range(60):
        pacer.note_runs([("orders.cancel", 0.012)])  # slower, all of them
    assert pacer.size() == 1
    # Runs alone count too: the size grows back as tasks get quick again.
    for _ in range(100):
        pacer.note_runs([("orders.cancel", 0.0005)])
    assert 35 <= pacer.size() <= 40


def test_a_slow_task_does_not_shrink_the_groups_of_the_others():
    pacer = Pacer(budget=0.02, max_size=50)
    pacer.note_runs([("orders.cancel", 0.0005)])
    for _ in range(10):
        pacer.note_runs([("orders.cancel", 0.0005), ("reports.build", 0.5)])
    assert "reports.build" in pacer.slow
    assert pacer.size() == 40
