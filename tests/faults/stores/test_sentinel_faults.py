"""Redis Sentinel: the primary is SIGKILLed under load and a replica promoted.

Every process finds the primary through three real sentinels. Writes the
old primary acknowledged but had not passed on to its replica die with it:
to the sweeper that is one more Redis data loss, repaired from the rows
(I1), while the commands follow the sentinels to the new primary."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import Sentinel

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask
from django_delayq.store import connection
from django_delayq.store.keys import shard_keys
from django_delayq.worker import Worker
from tests.faults.harness import (
    FAULT_DELAYQ,
    SWEEP_INTERVAL,
    Rig,
    schedule_records,
    sweep_count,
    sweep_totals,
)
from tests.faults.invariants import Expect, check
from tests.testapp.tasks import add
from tools.procs import wait_for
from tools.servers.sentinel import SERVICE, SentinelSet

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


class SentinelRig(Rig):
    """A rig whose Redis is whichever server the sentinels name the primary."""

    def __init__(self, sentinels: SentinelSet, delayq: dict[str, Any], logs: Path):
        super().__init__(sentinels.primary(), delayq, logs)
        self.sentinels = sentinels

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            nodes = [(s.host, s.port) for s in self.sentinels.sentinels]
            self._client = Sentinel(nodes, socket_timeout=2).master_for(
                SERVICE, socket_timeout=5
            )
        return self._client


@pytest.fixture
def sentinels() -> Iterator[SentinelSet]:
    with SentinelSet() as started:
        yield started
    connection.reset()


@pytest.fixture
def sentinel_rig(
    sentinels: SentinelSet, settings: Any, tmp_path: Path, transactional_db: None
) -> Iterator[SentinelRig]:
    delayq = {
        "REDIS_SENTINEL": sentinels.settings(),
        "QUEUES": {"orders": {"shards": 4}, "reports": {}},
        **FAULT_DELAYQ,
    }
    settings.DELAYQ = delayq
    connection.reset()
    rig = SentinelRig(sentinels, delayq, tmp_path)
    try:
        yield rig
    finally:
        rig.close()


def test_a_django_redis_cache_on_sentinel_can_be_shared(
    sentinels: SentinelSet, settings: Any, transactional_db: None
) -> None:
    """CACHE_ALIAS naming a cache on django-redis's own Sentinel client: the
    client is shared as is, and reaches the primary the sentinels name."""
    settings.CACHES = {
        **settings.CACHES,
        "redis": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{SERVICE}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": [(s.host, s.port) for s in sentinels.sentinels],
            },
        },
    }
    settings.DELAYQ = {"CACHE_ALIAS": "redis", "TEST_KEY_PREFIX": "delayq"}
    connection.reset()

    task = schedule(add, args=[2, 3])
    assert Dispatcher().run(once=True).moved == 1
    primary = redis.Redis(port=sentinels.primary().port)
    assert primary.xlen(shard_keys("delayq", "default", 0).ready) == 1
    assert Worker().run(once=True).processed == 1
    assert DelayedTask.objects.get(pk=task.pk).result == 5


def test_the_sentinel_primary_killed_under_load(sentinel_rig: SentinelRig) -> None:
    """The replica is frozen and cut off for the last moments of the primary,
    so the tasks scheduled then are acknowledged by the primary and lost
    with it."""
    rig = sentinel_rig
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 150, delay=lambda i: 0.5 + i * 0.02)
    time.sleep(1.5)  # tasks flowing

    replica = rig.sentinels.replica()
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        # Cut the replication link too: what the primary had already sent
        # would wait in the frozen replica's socket buffer and arrive anyway.
        rig.sentinels.primary().call("CLIENT", "KILL", "TYPE", "replica")
        unreplicated = schedule_records("unreplicated", 30, delay=lambda i: 1.0)
        time.sleep(0.3)
        killed = time.monotonic()
        old = rig.sentinels.kill_primary()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    batch += unreplicated
    # The sentinels still name the dead primary: the outbox takes these.
    batch += schedule_records("during", 30, delay=lambda i: 0.2)
    rig.sentinels.wait_for_failover(old)
    failover = time.monotonic() - killed
    batch += schedule_records("after", 50, delay=lambda i: 0.2)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_lateness=failover + SWEEP_INTERVAL + 6.0,
    )
    check(
        rig,
        "sentinel primary SIGKILLed, replica promoted",
        expect,
        notes=lambda: f"failover took {failover:.1f} s; {sweep_totals(sweeper)}",
    )
    # The promoted replica never had the frozen moments' writes: the
    # dispatcher (its first move there had to send its script again: a
    # promoted replica has none) or the sweeper put those tasks back from
    # their rows, whichever came first.
    dispatcher, *workers = procs
    reindexed = sweep_count(sweeper, "reindexed") + sweep_count(dispatcher, "reindexed")
    assert reindexed >= len(unreplicated.committed), (
        sweep_totals(sweeper),
        dispatcher.tail(),
    )
    # Each command says when Redis is back (the tasks may all have run
    # before one of them retried: wait for the lines themselves).
    expected = [
        (dispatcher, "dispatcher: Redis answers again, after"),
        (sweeper, "sweep: Redis and the database answer again, after"),
    ] + [(worker, "working again, after") for worker in workers]
    for proc, line in expected:
        wait_for(
            lambda proc=proc, line=line: line in proc.log(),
            30,
            f"{proc.label} to log {line!r}",
        )


def test_the_old_sentinel_primary_comes_back_with_stale_data(
    sentinel_rig: SentinelRig,
) -> None:
    """The killed primary restarts from a snapshot older than the failover:
    the sentinels make it a replica of the new primary, which replaces its
    stale due-sets and streams; nothing it held runs again or is lost."""
    rig = sentinel_rig
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 120, delay=lambda i: 0.5 + i * 0.02)
    time.sleep(1.0)  # tasks flowing
    old = rig.sentinels.primary()
    old.call("SAVE")  # what it will come back with
    time.sleep(1.0)  # tasks run on: the snapshot goes stale
    rig.sentinels.kill_primary()
    batch += schedule_records("during", 20, delay=lambda i: 0.2)
    rig.sentinels.wait_for_failover(old)
    old.persistence = True  # restart from the snapshot instead of empty
    old.start()
    assert "DB loaded from disk" in old.log_path.read_text()
    # Sentinel turns a returning old primary into a replica only after it has
    # reported itself a primary, and been up, for four publish periods (8 s),
    # seen at its INFO refresh (every 10 s): 8-20 s, more on a busy machine.
    rig.sentinels.wait_for_rejoin(old, timeout=90.0)
    batch += schedule_records("after", 40, delay=lambda i: 0.2)

    check(
        rig,
        "old sentinel primary back from a stale snapshot",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            max_lateness=SWEEP_INTERVAL + 8.0,
        ),
        notes=lambda: sweep_totals(sweeper),
    )


def test_limits_hold_through_a_failover(
    sentinels: SentinelSet, settings: Any, transactional_db: None
) -> None:
    """The primary killed while tasks under a concurrency limit run and
    wait: the promoted replica's limits are rebuilt from the rows before
    anything more is admitted; every task runs to its end once."""
    from django_delayq import registry
    from tests.limits.conftest import serving
    from tests.support.helpers import most_at_once
    from tests.testapp import limited
    from tests.testapp.models import Run

    settings.DELAYQ = {
        "REDIS_SENTINEL": sentinels.settings(),
        "QUEUES": {"orders": {"shards": 4}, "reports": {}, "limited": {}},
        **FAULT_DELAYQ,
    }
    connection.reset()
    for task in limited.TASKS:
        registry.register(task)
    try:
        tasks = [schedule(limited.two_at_once, args=[f"f{i}", 0.5]) for i in range(8)]
        with serving(threads=4):
            wait_for(lambda: Run.objects.count() >= 2, 60, "two runs")
            sentinels.kill_primary()
            wait_for(
                lambda: (
                    DelayedTask.objects.filter(
                        pk__in=[t.pk for t in tasks], status="succeeded"
                    ).count()
                    == len(tasks)
                ),
                120,
                "every task succeeded after the failover",
            )
    finally:
        for task in limited.TASKS:
            registry.unregister(task.name)
    runs = list(Run.objects.all())
    most = most_at_once(runs)
    assert most <= 2
    assert sorted(r.key for r in runs) == sorted(f"f{i}" for i in range(8))
