"""The fair-share policy of the shard leases, as a table: no Redis."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from django_delayq.dispatcher.leases import Decision, fair_share, share_out


@dataclass
class Leases:
    """The leases of the other shards, as the policy asks about them."""

    #: shards another dispatcher holds
    others: set[str] = field(default_factory=set)
    #: shards whose Redis fails
    failing: set[str] = field(default_factory=set)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def take(self, label: str) -> bool | None:
        self.asked.append(("take", label))
        return None if label in self.failing else label not in self.others

    def is_free(self, label: str) -> bool | None:
        self.asked.append(("is_free", label))
        return None if label in self.failing else label not in self.others

    def release(self, label: str) -> bool | None:
        self.asked.append(("release", label))
        return None if label in self.failing else True


def shards(count: int) -> list[str]:
    return [f"q:{number}" for number in range(count)]


def labels(*numbers: int) -> tuple[str, ...]:
    return tuple(f"q:{number}" for number in numbers)


@pytest.mark.parametrize(
    ("shards_count", "alive", "held", "others", "taken", "released"),
    [
        # Alone: every shard.
        (4, 1, (), (), (0, 1, 2, 3), ()),
        (4, 1, (0, 1), (), (2, 3), ()),
        # Nobody counted yet (0 alive) counts as one.
        (4, 0, (), (), (0, 1, 2, 3), ()),
        # Two alive: half each, the free ones first in order.
        (4, 2, (), (), (0, 1), ()),
        (4, 2, (), (0, 1), (2, 3), ()),
        (4, 2, (0, 1), (2, 3), (), ()),
        # An odd count rounds up: nothing left undrained.
        (5, 2, (), (), (0, 1, 2), ()),
        (5, 2, (3, 4), (0, 1), (2,), ()),
        # More dispatchers than shards: one each at most.
        (2, 4, (), (), (0,), ()),
        (2, 4, (), (0,), (1,), ()),
        (2, 4, (), (0, 1), (), ()),
        # Over the fair share: the last ones go back.
        (4, 2, (0, 1, 2, 3), (), (), (3, 2)),
        (6, 3, (0, 1, 2, 3), (4, 5), (), (3, 2)),
        (4, 4, (0, 1), (2, 3), (), (1,)),
        # At the fair share: kept as it is.
        (4, 2, (1, 3), (0, 2), (), ()),
        (8, 3, (0, 1, 2), (3, 4, 5, 6, 7), (), ()),
    ],
)
def test_a_dispatcher_takes_and_hands_back_up_to_its_fair_share(
    shards_count, alive, held, others, taken, released
):
    names = shards(shards_count)
    held_labels = labels(*held)
    decision = share_out(
        names,
        alive=alive,
        held=held_labels,
        answers=Leases(others=set(labels(*others))),
        unowned_checks={},
    )
    assert decision.fair == fair_share(shards_count, alive)
    assert decision.taken == labels(*taken)
    assert decision.released == labels(*released)
    assert set(decision.kept) == set(held_labels) - set(decision.released)
    assert decision.changed == bool(taken or released)
    assert decision.orphans == ()


@pytest.mark.parametrize(
    ("checks_before", "taken", "checks_after"),
    [
        # The first check that finds it free only counts it...
        (0, (), 1),
        # ...the second takes it, beyond the fair share.
        (1, (2,), 0),
    ],
)
def test_a_shard_found_free_twice_is_taken_beyond_the_fair_share(
    checks_before, taken, checks_after
):
    """4 shards, 2 counted alive (the count still includes a dead one): this
    one holds its 2, and shard 2 has no owner."""
    checks = {"q:2": checks_before}
    decision = share_out(
        shards(4),
        alive=2,
        held=labels(0, 1),
        answers=Leases(others=set(labels(3))),
        unowned_checks=checks,
    )
    assert decision.taken == labels(*taken)
    assert decision.orphans == labels(*taken)
    assert checks["q:2"] == checks_after
    assert checks["q:3"] == 0  # held: its count starts again


def test_nothing_is_handed_back_on_the_check_that_takes_an_orphan():
    """The live count may still include the dead dispatcher: balancing
    waits for the next check."""
    decision = share_out(
        shards(4),
        alive=3,
        held=labels(0, 1),
        answers=Leases(),
        unowned_checks={"q:2": 1, "q:3": 1},
    )
    assert decision.taken == labels(2, 3)
    assert decision.released == ()
    assert "no one held" in decision.reason


def test_a_shard_whose_redis_fails_is_left_as_it_is():
    answers = Leases(failing=set(labels(0, 3)))
    decision = share_out(
        shards(4),
        alive=1,
        held=(),
        answers=answers,
        unowned_checks={},
    )
    assert decision.taken == labels(1, 2)
    # A failed hand-back keeps the shard, and the next one goes instead.
    decision = share_out(
        shards(4),
        alive=4,
        held=labels(0, 3),
        answers=Leases(failing=set(labels(3))),
        unowned_checks={},
    )
    assert decision.released == labels(0)
    assert decision.kept == labels(3)


def test_only_shards_beyond_the_fair_share_are_looked_at_before_a_take():
    """Up to the fair share a take is the look; beyond it, one read each."""
    answers = Leases(others=set(labels(0, 2, 3)))
    share_out(shards(4), alive=2, held=labels(1), answers=answers, unowned_checks={})
    assert answers.asked == [
        ("take", "q:0"),
        ("take", "q:2"),
        ("take", "q:3"),
    ]
    answers = Leases(others=set(labels(2, 3)))
    share_out(shards(4), alive=2, held=labels(0, 1), answers=answers, unowned_checks={})
    assert answers.asked == [("is_free", "q:2"), ("is_free", "q:3")]


def test_a_lost_lease_is_a_change():
    decision = share_out(
        shards(2),
        alive=2,
        held=labels(0),
        answers=Leases(others=set(labels(1))),
        unowned_checks={},
        lost=labels(1),
    )
    assert decision == Decision(fair=1, alive=2, kept=labels(0), lost=labels(1))
    assert decision.changed
    assert "took over" in decision.reason
