"""The dispatcher: moves due task ids from the due-sets to the ready streams.

One :class:`Dispatcher` per ``delayq_dispatch`` process. Its main loop:

1. keeps its shard leases (:mod:`django_delayq.dispatcher.leases`: take a fair share,
   renew, hand back extras);
2. runs ``move.lua`` on each owned shard until nothing more is due; the
   script answers with the next head's score and Redis' clock;
3. sleeps on a *local* timer until the earliest head is due (so the fire time
   does not depend on the Redis server's cron tick), or until woken early by
   a new earliest task (:mod:`django_delayq.dispatcher.wakeups`).

A move's reply also says whether Redis lost the shard's data (its index
marker is gone, or the server had to be sent the script: it restarted or
failed over; see :mod:`django_delayq.store.epochs`). The dispatcher then
rebuilds the index of the shards concerned from the rows at once
(:mod:`django_delayq.reconcile.rebuild`), takes back the leases lost with the
data, and moves again: tasks due soon after a loss are not left for the
sweeper's next pass. After an error every owned shard moves as soon as
Redis answers again, so that the first reply after an outage tells.

Idle, a dispatcher issues a handful of Redis commands per lease period, not
a poll every few ms.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from django.db import DatabaseError, connections

from .. import registry
from ..conf import get_settings
from ..db.connections import recycle_connections
from ..exceptions import RedisUnavailable
from ..ids import process_name
from ..limits.groups import limited_queues, shard_numbers
from ..ownership import (
    OWNER_CHECK_INTERVAL,
    OWNER_RETRY_INTERVAL,
    check_prefix_if_reachable,
)
from ..store import epochs, index, wake_lists
from ..store.backoff import Backoff
from ..store.connection import Client, get_client
from ..store.errors import Answers
from ..store.keys import ShardKeys, dispatchers_key, handover_key, shard_keys
from .admission import Admission
from .leases import Decision, DispatchStats, Leases, Shard
from .wakeups import WakeListener

logger = logging.getLogger(__name__)


class Dispatcher:
    """Move due ids to the ready streams of the shards this process leases.

    :param queues: queue names to serve; ``None`` serves every configured queue.
    :param batch_size: the most ids one ``move.lua`` call moves.
    :param lease_ttl: seconds a shard lease lives without renewal: how long a
        dead dispatcher's shards wait before another takes them over.
    :param max_wait: the longest the loop sleeps with nothing due, a backstop
        against a lost wake-up.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        batch_size: int = 1000,
        lease_ttl: float = 30.0,
        max_wait: float = 60.0,
    ) -> None:
        settings = get_settings()
        names = list(settings.queues) if not queues else list(queues)
        self.queues = [settings.queue(name) for name in names]
        if not 1 <= batch_size <= 10_000:
            raise ValueError(f"batch_size must be from 1 to 10000; got {batch_size}.")
        if not 1 <= lease_ttl <= 86400:  # also refuses nan and inf
            raise ValueError(
                f"lease_ttl must be from 1 to 86400 seconds; got {lease_ttl}."
            )
        if not max_wait > 0:
            raise ValueError(f"max_wait must be a positive number; got {max_wait}.")
        self.batch_size = batch_size
        self.lease_ttl = lease_ttl
        self.max_wait = max_wait
        self.prefix = settings.key_prefix
        #: on a Redis Cluster each shard's node fails on its own
        self._cluster = settings.cluster
        self.token = process_name(random_digits=8)
        registry.autodiscover()  # the tasks' limits
        limited = limited_queues(get_client("loop"))
        self.shards = [
            Shard(shard_keys(self.prefix, queue.name, number))
            for queue in self.queues
            for number in shard_numbers(queue, limited)
        ]
        self.stats = DispatchStats()
        self.leases = Leases(
            self.shards,
            token=self.token,
            members_key=dispatchers_key(self.prefix, [q.name for q in self.queues]),
            ttl=lease_ttl,
        )
        #: shards whose move said Redis lost data -> whether it restarted
        #: (the rebuild is forced, see store.epochs)
        self._lost: dict[ShardKeys, bool] = {}
        self._stopping = threading.Event()
        self._admission = Admission(self.stats, self._stopping)
        self._wake = threading.Event()
        self._listener = WakeListener(
            self.shards,
            wake=self._wake,
            stopping=self._stopping,
            idle_wait=lease_ttl / 2,
            handover=handover_key(self.leases.members_key),
        )

    # -- public ---------------------------------------------------------------

    def run(self, *, once: bool = False) -> DispatchStats:
        """Dispatch until :meth:`stop` is called (or, with ``once``, until
        nothing owned is due), then hand the leases back."""
        client = get_client("loop")
        logger.info(
            "dispatcher %s serving %s",
            self.token,
            ", ".join(f"{q.name} ({q.shards} shards)" for q in self.queues),
        )
        keeper = None
        if not once:
            self._listener.start()
            # Each dispatcher also keeps the periodic schedules planned.
            # Imported here: a --once pass (and whoever only imports this
            # module) has no use for the planner and the declared schedules.
            from ..recurring.keeper import Keeper

            keeper = Keeper("dispatcher")
            keeper.start()
        next_leases = next_owner_check = 0.0
        backstop = time.monotonic() + self.max_wait
        backoff = Backoff("dispatcher", logger)
        try:
            while not self._stopping.is_set():
                try:
                    now = time.monotonic()
                    if now >= next_owner_check:
                        # Before any move, and now and then after (Redis may
                        # have restarted empty and been claimed by another
                        # project since); see django_delayq.ownership.
                        checked = check_prefix_if_reachable()
                        next_owner_check = now + (
                            OWNER_CHECK_INTERVAL if checked else OWNER_RETRY_INTERVAL
                        )
                    handed_over = self._listener.handed_over()
                    if now >= next_leases or handed_over:
                        self._keep_leases(client, recount=handed_over)
                        next_leases = now + self.lease_ttl / 2
                    if now >= backstop or once:
                        # Look at every owned shard now and then, in case a
                        # wake-up was lost (e.g. Redis restarted meanwhile).
                        self._move_all_now()
                        backstop = now + self.max_wait
                    self._wake.clear()  # before draining: no wake-up is lost
                    self._take_woken(now)
                    self._drain(client, once)
                    if self._lost:
                        self._rebuild(client)
                        self._drain(client, once)  # what it indexed, if due
                    backoff.answered()
                except RedisUnavailable as exc:
                    if once:
                        raise  # one pass asked for: say it could not be made
                    # The first moves after Redis answers again say whether
                    # it lost data meanwhile (a restart): each owned shard
                    # moves then, whenever its head is due.
                    self._move_all_now()
                    self._stopping.wait(backoff.failed(exc))
                    continue
                if once:
                    break
                self._sleep(min(next_leases, backstop))
        finally:
            self._hand_back(client)
            if keeper is not None:
                keeper.stop()
            if not once:
                # The rows the admission of limits read (see .admission):
                # this thread's connections go with it. A once pass runs in
                # its caller's thread, whose connections are the caller's.
                connections.close_all()
        return self.stats

    def stop(self) -> None:
        """Finish the current batch, hand the leases back and return from run()."""
        self._stopping.set()
        self._wake.set()

    # -- the loop ---------------------------------------------------------------

    def _take_woken(self, now: float) -> None:
        woken = self._listener.woken()
        for shard in self.shards:
            if shard.owned and shard.keys.wake in woken:
                shard.due_at = now

    def _drain(self, client: Client, once: bool = False) -> None:
        """Move what is due on every owned shard that is due or was woken.

        On a Redis Cluster a shard whose node fails is retried on its own
        back-off while the others go on: one primary failing over must not
        stop the shards the other primaries serve. So is a shard whose Redis
        answers with an error about its own keys (a due-set that is not a
        sorted set: the sweeper replaces it). On one unreachable Redis every
        shard fails together, so the error reaches the loop, which backs off
        as a whole; so does any error of a ``--once`` pass, which must say
        that it could not be made.
        """
        now = time.monotonic()
        failed: list[tuple[Shard, RedisUnavailable]] = []
        answers = Answers()
        for shard in self.shards:
            if not shard.owned or shard.due_at is None or shard.due_at > now:
                continue
            try:
                self._drain_shard(client, shard)
            except RedisUnavailable as exc:
                failed.append((shard, exc))
                # An error Redis answered with (a key of the wrong type) is
                # an answer: Redis is up.
                answers.failed(exc, answered=not exc.unreachable)
                continue
            answers.answer()
            shard.backoff.answered()
        if failed and once:
            raise failed[-1][1]
        if not self._cluster:
            answers.raise_if_none_answered()
        for shard, error in failed:
            # Capped low, so that a shard moves again soon after its node's
            # failover; a node that refuses connections costs nothing much.
            # An error Redis answered with (a key of the wrong type) lasts
            # until the sweeper's next pass: no need to ask every second.
            cap = 1.0 if error.unreachable else 30.0
            shard.due_at = time.monotonic() + shard.backoff.failed(error, cap=cap)

    def _drain_shard(self, client: Client, shard: Shard) -> None:
        """Move what is due on one shard, and time its next due task."""
        if shard.keys.limited:
            self._admission.admit(client, shard)
            self._note_loss(shard, self._admission.last)
            return
        while not self._stopping.is_set():
            sent = time.monotonic()
            reply = index.move_due(client, shard.keys, self.token, self.batch_size)
            moved, head, redis_now, redis_us = reply[:4]
            self._note_loss(shard, reply)
            if moved < 0:
                # Another dispatcher holds the shard now. If a wake-up
                # brought us here, it was meant for the new owner.
                wake_lists.wake(client, shard.keys.wake)
                self.leases.lose(shard)
                self.stats.leases_lost += 1
                self._listener.nudge(client)
                break
            if moved:
                self.stats.moved += moved
                self.stats.batches += 1
                self.stats.per_shard[shard.label] = (
                    self.stats.per_shard.get(shard.label, 0) + moved
                )
                logger.debug("moved %d from %s", moved, shard.label)
            if moved == self.batch_size:
                continue  # more may be due right now
            # The head's delay is measured on Redis' clock, so a skewed
            # local clock shifts nothing; only the local timer runs here.
            # It counts from when the script was sent, not from when its
            # reply came back: a slow reply must not make the next task
            # late too. Redis read its clock a little after ``sent``, so
            # the timer may fire a moment early; the script then moves
            # nothing (due is decided by Redis' clock) and the next wait
            # is shorter than a millisecond.
            redis_ms = redis_now + redis_us / 1000
            shard.due_at = None if head < 0 else sent + (head - redis_ms) / 1000
            break

    def _note_loss(self, shard: Shard, reply: index.Moved | None) -> None:
        if reply is not None and (not reply.marked or reply.reloaded):
            # Rebuilt once this pass is over (see _rebuild).
            self._lost[shard.keys] = self._lost.get(shard.keys, False) or (
                reply.reloaded
            )

    def _rebuild(self, client: Client) -> None:
        """Redis lost data: rebuild the index of the shards concerned from
        the rows now, take back the leases lost with it, and move again.

        The shards concerned are every configured queue's (on a Redis
        Cluster, those of the node that answered so): the other queues'
        dispatchers may never see the same sign, as a restarted server is
        sent the script once. Each is claimed first, so one process
        rebuilds it however many noticed.
        """
        lost, self._lost = self._lost, {}
        force = any(lost.values())
        settings = get_settings()
        limited = limited_queues(client)
        every = [
            shard_keys(self.prefix, queue.name, number)
            for queue in settings.queues.values()
            for number in shard_numbers(queue, limited)
        ]
        concerned: dict[ShardKeys, None] = {}
        for keys in lost:
            concerned.update(
                dict.fromkeys(epochs.on_node_of(client, keys.epoch, every))
            )
        why = (
            "its server restarted or failed over"
            if force
            else "its index marker is gone (a new Redis, or one that lost its data)"
        )
        # Imported here: only a Redis that lost its data needs the rebuild,
        # so a dispatcher does not load it (and its queries) to start.
        from ..reconcile import rebuild

        recycle_connections()
        try:
            rebuilt, repairs = rebuild(client, list(concerned), self.token, force=force)
        except DatabaseError as exc:
            # The claims expire and the next move sees the loss again.
            logger.warning(
                "dispatcher %s: Redis may have lost data (%s) but the index "
                "could not be rebuilt from the database: %s; trying again in "
                "%d s",
                self.token,
                why,
                exc,
                epochs.CLAIM_MS // 1000,
            )
            return
        if rebuilt:
            level = logging.WARNING if repairs.reindexed else logging.INFO
            logger.log(
                level,
                "dispatcher %s: rebuilt the index of %s from the rows, as Redis "
                "may have lost data (%s): reindexed %d, removed %d, corrected %d%s",
                self.token,
                ", ".join(f"{k.queue}:{k.shard}" for k in rebuilt),
                why,
                repairs.reindexed,
                repairs.removed,
                repairs.corrected,
                ""
                if repairs.oldest_lost is None
                else f" (the oldest reindexed task was due at "
                f"{repairs.oldest_lost.isoformat(sep=' ', timespec='milliseconds')})",
            )
        # The leases went with the data: take them back now, not at the
        # next lease check, and move every owned shard.
        self._keep_leases(client)
        self._move_all_now()

    def _keep_leases(self, client: Client, *, recount: bool = False) -> Decision:
        """Check the leases, count what changed, and have the wake-up
        listener follow the shards now owned."""
        decision = self.leases.keep(client, recount=recount)
        self.stats.leases_taken += len(decision.taken)
        self.stats.leases_lost += len(decision.lost)
        if decision.changed:
            logger.debug("dispatcher %s: %s", self.token, decision.reason)
            self._listener.nudge(client)
        return decision

    def _move_all_now(self) -> None:
        """Have every owned shard move at once, whenever its head is due."""
        now = time.monotonic()
        for shard in self.shards:
            if shard.owned:
                shard.due_at = now

    def _sleep(self, until: float) -> None:
        deadline = min(
            [until]
            + [s.due_at for s in self.shards if s.owned and s.due_at is not None]
        )
        timeout = deadline - time.monotonic()
        # A handover that came after this pass's lease check cleared the
        # wake-up with the others: look at the leases again now. So did a
        # stop() that came before this pass cleared it: its wake-up is gone,
        # and waiting would wait out the whole timeout (a lease period).
        if (
            timeout > 0
            and not self._stopping.is_set()
            and not self._listener.handed_over(clear=False)
        ):
            self._wake.wait(timeout)

    def _hand_back(self, client: Client) -> None:
        try:
            self._stopping.set()
            self._listener.nudge(client)
            # Leases first, threads after: the next owner takes over while
            # this process waits for its listener (a wake-up its threads
            # still take is put back for the new owner).
            # A --once pass started no listener: no one to wake but others.
            self.leases.release_all(client, hand_over=self._listener.started)
        except RedisUnavailable as exc:
            logger.warning("dispatcher: could not hand back leases: %s", exc)
        finally:
            self._listener.join()
