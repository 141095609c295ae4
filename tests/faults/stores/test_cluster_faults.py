"""Redis Cluster: shards spread over three primaries, a primary killed under
load, and slots migrated while tasks flow.

A real cluster of six ``redis-server`` nodes (three primaries, one replica
each). Every shard is a slot of its own, so no script, transaction or
blocking read may name two shards: a ``CROSSSLOT`` error anywhere fails
these tests. A primary's acknowledged but unreplicated writes die with it:
to the sweeper that is one more Redis data loss, repaired from the rows (I1).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone
from redis.cluster import RedisCluster as ClusterClient

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask
from django_delayq.store import activity, connection
from django_delayq.store.keys import shard_keys, sweeper_lock_key
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from tests.faults.harness import (
    FAULT_DELAYQ,
    SWEEP_INTERVAL,
    Rig,
    schedule_bulk,
    schedule_records,
    sweep_count,
    sweep_totals,
)
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tests.testapp.tasks import add
from tools.procs import wait_for
from tools.servers.cluster import ClusterNode, RedisCluster

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

SHARDS = 6


class ClusterRig(Rig):
    """A rig whose Redis is a cluster, looked at through a cluster client."""

    def __init__(self, cluster: RedisCluster, delayq: dict[str, Any], logs: Path):
        super().__init__(cluster.nodes[0], delayq, logs)
        self.cluster = cluster

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            client: Any = ClusterClient.from_url(self.cluster.url, socket_timeout=5)
            self._client = client
        return self._client


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    with RedisCluster() as started:
        yield started
    connection.reset()


@pytest.fixture
def cluster_settings(cluster: RedisCluster, settings: Any) -> dict[str, Any]:
    delayq = {
        "REDIS_URL": cluster.url,
        "REDIS_CLUSTER": True,
        "QUEUES": {"orders": {"shards": SHARDS}, "reports": {}},
        **FAULT_DELAYQ,
    }
    settings.DELAYQ = delayq
    connection.reset()
    return delayq


@pytest.fixture
def cluster_rig(
    cluster: RedisCluster,
    cluster_settings: dict[str, Any],
    tmp_path: Path,
    transactional_db: None,
) -> Iterator[ClusterRig]:
    rig = ClusterRig(cluster, cluster_settings, tmp_path)
    try:
        yield rig
    finally:
        rig.close()


def _ready_key(shard: int) -> str:
    return shard_keys("delayq", "orders", shard).ready


def test_every_shard_runs_in_process_on_its_own_node(
    cluster: RedisCluster, cluster_settings: dict[str, Any], transactional_db: None
) -> None:
    """Tasks on every shard of a queue spread over three primaries are
    scheduled, dispatched and run, each ``--once`` command included."""
    owners = {cluster.primary_of(_ready_key(n)).port for n in range(SHARDS)}
    assert len(owners) >= 2, "the shards' slots should span several primaries"

    tasks = [schedule(add, args=[n, 1], queue="orders") for n in range(60)]
    assert len({t.shard for t in tasks}) == SHARDS
    assert Dispatcher().run(once=True).moved == 60
    assert Worker(concurrency=2).run(once=True).processed == 60
    rows = DelayedTask.objects.filter(pk__in=[t.pk for t in tasks])
    assert sorted(r.result for r in rows) == sorted(n + 1 for n in range(60))
    assert {r.status for r in rows} == {"succeeded"}
    # The activity counters went with each shard's acknowledgement to its
    # own node, and the dashboard's read gathers them from every node.
    minutes = activity.read_hour(
        connection.get_client("schedule"),
        "delayq",
        get_settings().queues.values(),
        timezone.now(),
    )
    assert sum(m.started for m in minutes) == 60
    assert sum(m.succeeded for m in minutes) == 60


def test_a_sleeping_dispatcher_and_worker_are_woken_on_every_node(
    cluster: RedisCluster, cluster_settings: dict[str, Any], transactional_db: None
) -> None:
    """Idle, the dispatcher and the worker block on each shard; a task due
    now on any shard wakes them long before a blocking read would end."""
    dispatcher, worker = Dispatcher(), Worker()
    threads = [
        threading.Thread(target=dispatcher.run, daemon=True),
        threading.Thread(target=worker.run, daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # both blocked on every shard by now
        tasks = []
        for n in range(12):
            tasks.append(schedule(add, args=[n, n], queue="orders"))
            time.sleep(0.05)
        ids = [t.pk for t in tasks]
        assert len({t.shard for t in tasks}) > 1

        def all_done() -> bool:
            done = DelayedTask.objects.filter(pk__in=ids, status="succeeded")
            return done.count() == len(ids)

        # A dispatcher's wake-up BLPOP blocks for 30 s and a worker's read
        # for 5 s: done within 3 s means every shard's listener woke.
        wait_for(all_done, 3.0, "every task run after wake-ups")
    finally:
        dispatcher.stop()
        worker.stop()
        for thread in threads:
            thread.join(timeout=40)
    assert not any(t.is_alive() for t in threads)


def _freeze_replica_and_kill(
    cluster: RedisCluster, key: str, rig: ClusterRig
) -> tuple[ClusterNode, Any, float]:
    """Schedule tasks that only ``key``'s primary gets, then kill it."""
    primary = cluster.primary_of(key)
    replica = cluster.replica_of(primary)
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        primary.call("CLIENT", "KILL", "TYPE", "replica")
        unreplicated = schedule_records("unreplicated", 40, delay=lambda i: 1.0)
        time.sleep(0.3)
        killed = time.monotonic()
        primary.kill()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    return primary, unreplicated, killed


def test_a_cluster_primary_killed_under_load(cluster_rig: ClusterRig) -> None:
    """The primary of one shard dies with writes its frozen replica never
    got; the replica takes over its slots, the commands follow the slot map,
    and the sweeper re-indexes what was lost."""
    rig, cluster = cluster_rig, cluster_rig.cluster
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 150, delay=lambda i: 0.5 + i * 0.02)
    time.sleep(1.5)  # tasks flowing

    doomed = cluster.primary_of(_ready_key(0))
    on_doomed = {
        n for n in range(SHARDS) if cluster.primary_of(_ready_key(n)) is doomed
    }
    old, unreplicated, killed = _freeze_replica_and_kill(cluster, _ready_key(0), rig)
    batch += unreplicated
    # Until the replica takes over, writes to the dead primary's shards go
    # to the outbox; the other shards carry on.
    during = schedule_records("during", 30, delay=lambda i: 0.2)
    batch += during
    cluster.wait_for_failover(old)
    failover = time.monotonic() - killed
    failed_over_at = timezone.now()
    batch += schedule_records("after", 50, delay=lambda i: 0.2)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_lateness=failover + SWEEP_INTERVAL + 6.0,
    )
    check(
        rig,
        "cluster primary SIGKILLed, replica promoted",
        expect,
        notes=lambda: f"failover took {failover:.1f} s; {sweep_totals(sweeper)}",
    )
    # Some of the unreplicated tasks were on the dead primary's shards: the
    # promoted replica never had them. The dispatcher, whose next move there
    # had to send its script again (a promoted replica has none), rebuilt
    # the shards' index at once; the sweeper repairs whatever it left.
    dispatcher = procs[0]
    reindexed = sweep_count(sweeper, "reindexed") + sweep_count(dispatcher, "reindexed")
    assert reindexed >= 1, (sweep_totals(sweeper), dispatcher.tail())
    # The shards the other primaries serve did not wait for the failover:
    # their tasks due meanwhile ran before the replica took over.
    elsewhere = [t for t in during.committed.values() if t.shard not in on_doomed]
    assert elsewhere, f"every task went to the killed primary's shards {on_doomed}"
    started = DelayedTask.objects.filter(pk__in=[t.pk for t in elsewhere])
    assert all(t.started_at < failed_over_at for t in started), [
        (t.shard, t.started_at, failed_over_at) for t in started
    ]
    # Each command says when Redis is back: the dispatcher, and the readers
    # of the shards the dead primary served. The tasks may all have run
    # before a worker's readers of those shards retried (the other worker
    # read them): wait for the lines themselves.
    dispatcher, *workers = procs
    for proc, line in [(dispatcher, "Redis answers again, after")] + [
        (worker, "reading again, after") for worker in workers
    ]:
        wait_for(
            lambda proc=proc, line=line: line in proc.log(),
            30,
            f"{proc.label} to log {line!r}",
        )


def test_slots_migrate_while_tasks_flow(cluster_rig: ClusterRig) -> None:
    """Resharding: each shard's slot moves to another primary, keys and
    all, while tasks are scheduled, dispatched and run. Clients follow the
    ASK and MOVED redirects; nothing is lost or run twice."""
    rig, cluster = cluster_rig, cluster_rig.cluster
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 120, delay=lambda i: 0.3 + i * 0.03)
    for shard in range(SHARDS):
        key = _ready_key(shard)
        source = cluster.primary_of(key)
        target = next(p for p in cluster.primaries() if p is not source)
        cluster.move_slot(key, target)
        assert cluster.primary_of(key) is target
        batch += schedule_records(f"moved-{shard}", 10, delay=lambda i: 0.1)
    batch += schedule_records("after", 40, delay=lambda i: 0.2)

    check(
        rig,
        "every shard's slot migrated under load",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            max_lateness=SWEEP_INTERVAL + 6.0,
        ),
        notes=lambda: sweep_totals(sweeper),
    )


def test_a_manual_cluster_failover_under_load(cluster_rig: ClusterRig) -> None:
    """``CLUSTER FAILOVER``: an operator hands a shard's slots to the
    replica (an upgrade, a host to drain) while tasks flow."""
    rig, cluster = cluster_rig, cluster_rig.cluster
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 150, delay=lambda i: 0.3 + i * 0.02)
    time.sleep(1.0)  # tasks flowing
    primary = cluster.primary_of(_ready_key(0))
    cluster.manual_failover(cluster.replica_of(primary))
    assert cluster.primary_of(_ready_key(0)) is not primary
    batch += schedule_records("after", 50, delay=lambda i: 0.2)

    check(
        rig,
        "cluster primary handed over with CLUSTER FAILOVER",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            max_lateness=SWEEP_INTERVAL + 6.0,
        ),
        notes=lambda: sweep_totals(sweeper),
    )


def test_a_cluster_primary_stalled_past_its_failover(cluster_rig: ClusterRig) -> None:
    """The primary of a shard freezes (SIGSTOP: a stalled host, a long GC
    pause of a VM) for longer than the node timeout; its replica takes over,
    and when it wakes up it finds itself a replica. Clients blocked on it
    must give up and follow the new slot map."""
    rig, cluster = cluster_rig, cluster_rig.cluster
    sweeper, *procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(sweeper, *procs)
    batch = schedule_records("before", 150, delay=lambda i: 0.5 + i * 0.02)
    time.sleep(1.5)  # tasks flowing
    stalled = cluster.primary_of(_ready_key(0))
    assert stalled.pid is not None
    os.kill(stalled.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        # Writes for its shards wait REDIS_TIMEOUT, then go to the outbox.
        batch += schedule_records("stalled", 30, delay=lambda i: 0.2)
        cluster.wait_for_failover(stalled)
        failover = time.monotonic() - frozen
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    cluster.wait_for_rejoin(stalled)
    batch += schedule_records("after", 50, delay=lambda i: 0.2)

    check(
        rig,
        "cluster primary stalled (SIGSTOP) past its failover, then resumed",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            # A read blocked on the frozen node ends when its socket times
            # out, or when the node wakes up and unblocks it as a replica.
            max_lateness=failover + SWEEP_INTERVAL + 6.0,
        ),
        notes=lambda: f"failover took {failover:.1f} s; {sweep_totals(sweeper)}",
    )


def test_a_sweep_pass_repairs_the_shards_whose_node_answers(
    cluster: RedisCluster, cluster_settings: dict[str, Any], transactional_db: None
) -> None:
    """A primary and its replica both down (no failover can happen): a pass
    re-indexes the lost tasks of the shards the other nodes serve, leaves
    the dead node's shards for a later pass, and says so, instead of failing
    as a whole."""
    tasks = [schedule(add, args=[n, 1], queue="orders") for n in range(60)]
    admin: Any = ClusterClient.from_url(cluster.url)
    for n in range(SHARDS):  # Redis lost every shard's due-set
        admin.delete(shard_keys("delayq", "orders", n).due)
    # A primary with orders shards, but not the sweep lock's: without its
    # lock a pass cannot run at all.
    lock_node = cluster.primary_of(sweeper_lock_key("delayq"))
    owner = {
        n: cluster.primary_of(shard_keys("delayq", "orders", n).due)
        for n in range(SHARDS)
    }
    dead = next(node for node in owner.values() if node is not lock_node)
    # Every configured shard counts, of every queue.
    others_dead = sum(
        cluster.primary_of(shard_keys("delayq", queue, 0).due) is dead
        for queue in ("reports", "default")
    )
    live_shards = {n for n, node in owner.items() if node is not dead}
    replica = cluster.replica_of(dead)
    replica.kill()
    dead.kill()

    result = Sweeper().sweep()

    assert result.unreachable == SHARDS - len(live_shards) + others_dead
    live_tasks = [t for t in tasks if t.shard in live_shards]
    assert result.reindexed == len(live_tasks)
    for n in live_shards:
        due = admin.zrange(shard_keys("delayq", "orders", n).due, 0, -1)
        assert sorted(due) == sorted(t.pk.bytes for t in live_tasks if t.shard == n)
    admin.close()


def test_one_primary_loses_its_data_alone(cluster_rig: ClusterRig) -> None:
    """FLUSHALL on one primary of three (its replica follows it): the
    dispatcher sees its shards' index marker gone on its next move there and
    rebuilds the index of that node's shards alone, from the rows, at once;
    the tasks due after the loss start within seconds, not at the sweeper's
    next pass, and the far-future backlog stays where it is."""
    rig, cluster = cluster_rig, cluster_rig.cluster
    sweeper, dispatcher, *workers = [
        # Its first pass at the start, and no other in the scenario: the
        # repair is the dispatcher's.
        rig.sweeper(interval=120.0),
        rig.start("delayq_dispatch"),
        rig.worker(),
        rig.worker(),
    ]
    rig.wait_ready(sweeper, dispatcher, *workers)
    # On the orders queue: spread over its shards, so over every primary.
    batch = schedule_bulk(
        "backlog", 3000, delay=lambda i: 86_400 + i, chunk=500, queue="orders"
    )
    backlog = set(batch.committed)
    batch += schedule_bulk(
        "soon", 240, delay=lambda i: 2.0 + i * 8.0 / 240, chunk=500, queue="orders"
    )
    wait_for(
        lambda: Ledger.objects.filter(key__startswith="soon-").count() >= 60,
        30,
        "a quarter of the soon tasks ran",
    )
    doomed = cluster.primary_of(_ready_key(0))
    on_doomed = {
        n for n in range(SHARDS) if cluster.primary_of(_ready_key(n)) is doomed
    }
    passes = sweeper.log().count("sweep:")
    # A new cluster's index was rebuilt once already, at the first moves.
    rebuilds = dispatcher.log().count("rebuilt the index of")
    doomed.call("FLUSHALL")
    lost_at = timezone.now()

    check(
        rig,
        "one cluster primary's data flushed, the others untouched",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            # Tasks in the workers' hands (2 workers x 2 threads) when their
            # stream entries went may run again.
            max_extra=4,
        ),
    )
    ran = set(Ledger.objects.values_list("key", flat=True))
    assert not ran & backlog, "far-future tasks ran"
    # The dispatcher rebuilt the lost node's shards, and only those.
    wait_for(
        lambda: dispatcher.log().count("rebuilt the index of") > rebuilds,
        10,
        "the dispatcher to rebuild the index",
    )
    line = [
        line for line in dispatcher.log().splitlines() if "rebuilt the index" in line
    ][rebuilds]
    rebuilt = {int(n) for n in re.findall(r"orders:(\d+)", line)}
    assert rebuilt == on_doomed, line
    assert sweeper.log().count("sweep:") == passes, "the sweeper repaired it"
    due_after = [
        task
        for key, task in batch.committed.items()
        if key.startswith("soon-") and task.run_at > lost_at and task.shard in on_doomed
    ]
    assert due_after, "no task of the lost node was due after the loss"
    started = dict(Ledger.objects.values_list("key", "at"))
    late = [(started[task.args[0]] - task.run_at).total_seconds() for task in due_after]
    assert max(late) <= 3.0, f"{len(late)} due after the loss, max {max(late):.2f} s"


def test_limits_hold_with_their_state_in_one_slot(
    cluster: RedisCluster, settings: Any, transactional_db: None
) -> None:
    """A queue's limits live in the slot of its limits shard: a concurrency
    limit and a rate limit hold across worker threads, with no CROSSSLOT,
    while the queue's other shards are on other nodes."""
    from django_delayq import registry
    from django_delayq.store.keys import LIMITS_SHARD
    from tests.limits.conftest import serving
    from tests.support.helpers import most_at_once
    from tests.testapp import limited
    from tests.testapp.models import Run

    settings.DELAYQ = {
        "REDIS_URL": cluster.url,
        "REDIS_CLUSTER": True,
        "QUEUES": {"orders": {"shards": SHARDS}, "reports": {}, "limited": {}},
        **FAULT_DELAYQ,
    }
    connection.reset()
    for task in limited.TASKS:
        registry.register(task)
    try:
        keys = shard_keys("delayq", "limited", LIMITS_SHARD)
        assert keys.ready.startswith("delayq:{limited:limits}")
        for i in range(6):
            schedule(limited.two_at_once, args=[f"c{i}", 0.2])
        for i in range(8):
            schedule(limited.five_a_second, args=[f"r{i}"])
        with serving(threads=6):
            wait_for(lambda: Run.objects.count() == 14, 60, "every run")
    finally:
        for task in limited.TASKS:
            registry.unregister(task.name)
    runs = list(Run.objects.all())
    concurrent = [r for r in runs if r.key.startswith("c")]
    most = most_at_once(concurrent)
    assert most == 2
    starts = sorted(r.started for r in runs if r.key.startswith("r"))
    assert all(
        len([s for s in starts[i:] if s < start + 1.0]) <= 5
        for i, start in enumerate(starts)
    )
