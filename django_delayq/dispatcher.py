"""The dispatcher: moves due task ids from the due-sets to the ready streams.

One :class:`Dispatcher` per ``delayq_dispatch`` process. Its main loop:

1. keeps its shard leases (take a fair share, renew, hand back extras);
2. runs ``move.lua`` on each owned shard until nothing more is due; the
   script answers with the next head's score and Redis' clock;
3. sleeps on a *local* timer until the earliest head is due (so the fire time
   does not depend on the Redis server's cron tick), or until woken early.

A listener thread blocks on the owned shards' wake lists with a long
server-side timeout; ``schedule()`` pushes to a wake list when it adds a new
earliest task, which wakes the main loop at once. Idle, a dispatcher issues a
handful of Redis commands per lease period, not a poll every few ms.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from .conf import get_settings
from .store import scripts
from .store.connection import BLOCK_SECONDS, get_client
from .store.keys import ShardKeys, dispatchers_key, shard_keys
from .timing import retry_pause

logger = logging.getLogger(__name__)


@dataclass
class _Shard:
    keys: ShardKeys
    owned: bool = False
    #: consecutive lease checks that found the shard without an owner
    unowned_checks: int = 0
    #: monotonic time at which the shard's earliest task is due; None if the
    #: due-set is empty (or the shard is not owned).
    due_at: float | None = None

    @property
    def label(self) -> str:
        return f"{self.keys.queue}:{self.keys.shard}"


@dataclass
class DispatchStats:
    moved: int = 0
    batches: int = 0
    leases_taken: int = 0
    leases_lost: int = 0
    per_shard: dict[str, int] = field(default_factory=dict)


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
        if not lease_ttl >= 1:
            raise ValueError(f"lease_ttl must be at least 1 second; got {lease_ttl}.")
        if not max_wait > 0:
            raise ValueError(f"max_wait must be a positive number; got {max_wait}.")
        self.batch_size = batch_size
        self.lease_ttl = lease_ttl
        self.max_wait = max_wait
        self.prefix = settings.key_prefix
        self._members_key = dispatchers_key(self.prefix, [q.name for q in self.queues])
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.shards = [
            _Shard(shard_keys(self.prefix, queue.name, number))
            for queue in self.queues
            for number in range(queue.shards)
        ]
        self.stats = DispatchStats()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._leases_changed = threading.Event()
        self._cycles = 0
        self._alive = 1
        #: the wake lists the listener is blocked on right now
        self._listening: list[str] = []
        #: shards the listener saw woken, handed to the main loop under a lock
        #: (the main loop alone writes ``_Shard.due_at``)
        self._woken: set[str] = set()
        self._woken_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._move = scripts.load("move")
        self._lease = scripts.load("lease")
        self._release = scripts.load("release")
        self._members = scripts.load("members")

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
        if not once:
            self._listener = threading.Thread(
                target=self._listen, name="delayq-dispatch-wake", daemon=True
            )
            self._listener.start()
        next_leases = 0.0
        backstop = time.monotonic() + self.max_wait
        failures = 0
        try:
            while not self._stopping.is_set():
                try:
                    now = time.monotonic()
                    if now >= next_leases:
                        self._keep_leases(client)
                        next_leases = now + self.lease_ttl / 2
                    if now >= backstop or once:
                        # Look at every owned shard now and then, in case a
                        # wake-up was lost (e.g. Redis restarted meanwhile).
                        for shard in self.shards:
                            if shard.owned:
                                shard.due_at = now
                        backstop = now + self.max_wait
                    self._wake.clear()  # before draining: no wake-up is lost
                    self._take_woken(now)
                    self._drain(client)
                    failures = 0
                except redis.RedisError as exc:
                    failures += 1
                    pause = retry_pause(failures)
                    logger.warning(
                        "dispatcher: Redis error (%s); retrying in %.1f s", exc, pause
                    )
                    self._stopping.wait(pause)
                    continue
                if once:
                    break
                self._sleep(min(next_leases, backstop))
        finally:
            self._hand_back(client)
        return self.stats

    def stop(self) -> None:
        """Finish the current batch, hand the leases back and return from run()."""
        self._stopping.set()
        self._wake.set()

    # -- the loop ---------------------------------------------------------------

    def _take_woken(self, now: float) -> None:
        with self._woken_lock:
            woken, self._woken = self._woken, set()
        for shard in self.shards:
            if shard.owned and shard.keys.wake in woken:
                shard.due_at = now

    def _drain(self, client: redis.Redis) -> None:
        """Move what is due on every owned shard that is due or was woken."""
        now = time.monotonic()
        for shard in self.shards:
            if not shard.owned or shard.due_at is None or shard.due_at > now:
                continue
            while not self._stopping.is_set():
                sent = time.monotonic()
                moved, head, redis_now, redis_us = self._move(
                    client,
                    (shard.keys.due, shard.keys.ready, shard.keys.lease),
                    (self.token, self.batch_size),
                )
                if moved < 0:
                    # Another dispatcher holds the shard now. If a wake-up
                    # brought us here, it was meant for the new owner.
                    client.lpush(shard.keys.wake, "1")
                    self._lost(shard)
                    self._nudge_listener(client)
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

    def _sleep(self, until: float) -> None:
        deadline = min(
            [until]
            + [s.due_at for s in self.shards if s.owned and s.due_at is not None]
        )
        timeout = deadline - time.monotonic()
        if timeout > 0:
            self._wake.wait(timeout)

    def _listen(self) -> None:
        """Block on the owned shards' wake lists; set the wake event on a push."""
        client = get_client("blocking")
        failures = 0
        while not self._stopping.is_set():
            self._leases_changed.clear()
            by_key = {s.keys.wake: s for s in self.shards if s.owned}
            if not by_key:
                self._leases_changed.wait(self.lease_ttl / 2)
                continue
            self._listening = list(by_key)
            try:
                popped = client.blpop(self._listening, timeout=math.ceil(BLOCK_SECONDS))
                if popped:
                    key = popped[0]
                    name = key.decode() if isinstance(key, bytes) else key
                    shard = by_key[name]
                    if shard.owned:
                        with self._woken_lock:
                            self._woken.add(name)
                        self._wake.set()
                    else:
                        # Handed back while we were blocked: the wake-up is for
                        # the shard's new owner, so put it back.
                        client.lpush(name, "1")
                failures = 0
            except redis.RedisError as exc:
                failures += 1
                logger.debug("dispatcher listener: %s", exc)
                self._stopping.wait(retry_pause(failures))

    # -- leases -----------------------------------------------------------------

    def _keep_leases(self, client: redis.Redis) -> None:
        """Renew owned leases, take free shards up to a fair share, hand back extras.

        Runs every half lease TTL, which leaves half a TTL of margin for a
        slow renewal. A shard found without an owner on two checks in a row
        is taken whatever the fair share says: the live count can lag behind
        a dispatcher's death, and an unowned shard is never drained.
        """
        ttl_ms = int(self.lease_ttl * 1000)
        self._cycles += 1
        if self._cycles % 2 == 1:
            # The membership heartbeat goes every other check (it lives for
            # four): it only balances shards, so it may lag a little, and an
            # idle dispatcher spends fewer Redis commands.
            self._alive = int(
                self._members(
                    client,
                    (self._members_key,),
                    (self.token, 2 * ttl_ms, "1" if self._cycles % 10 == 1 else "0"),
                )
            )
        fair = math.ceil(len(self.shards) / max(self._alive, 1))
        changed = False
        # Renew every owned lease in one round trip.
        owned_shards = [s for s in self.shards if s.owned]
        if owned_shards:
            pipe = client.pipeline(transaction=False)
            for shard in owned_shards:
                self._lease.queue(pipe, (shard.keys.lease,), (self.token, ttl_ms))
            renewed = scripts.execute_pipeline(client, pipe, [self._lease])
            for shard, outcome in zip(owned_shards, renewed, strict=True):
                if outcome == 0:
                    self._lost(shard)
                    changed = True
        owned = sum(s.owned for s in self.shards)
        taken_now = set()
        for shard in self.shards:
            if shard.owned:
                continue
            if owned >= fair:
                orphaned = not client.exists(shard.keys.lease)
                shard.unowned_checks = shard.unowned_checks + 1 if orphaned else 0
                if shard.unowned_checks < 2:
                    continue
            if self._lease(client, (shard.keys.lease,), (self.token, ttl_ms)) == 1:
                shard.unowned_checks = 0
                shard.owned = True
                taken_now.add(shard.label)
                shard.due_at = time.monotonic()  # drain it now
                owned += 1
                changed = True
                self.stats.leases_taken += 1
                logger.info("dispatcher %s took shard %s", self.token, shard.label)
        for shard in reversed(self.shards):
            if owned <= fair:
                break
            if taken_now:
                # Shards were orphaned: the live count may still include a
                # dead dispatcher. Balance again once things settle.
                break
            if shard.owned and owned > fair:
                self._release(client, (shard.keys.lease,), (self.token,))
                shard.owned = False
                shard.due_at = None
                owned -= 1
                changed = True
                logger.info("dispatcher %s handed back %s", self.token, shard.label)
        if changed:
            self._nudge_listener(client)

    def _nudge_listener(self, client: redis.Redis) -> None:
        """Make the listener re-read the owned shards (or see that we stop).

        A push to one of the wake lists it blocks on returns its BLPOP now;
        the cost is one extra drain of that shard.
        """
        self._leases_changed.set()
        listening = self._listening
        if self._listener is not None and listening:
            client.lpush(listening[0], "1")

    def _lost(self, shard: _Shard) -> None:
        shard.owned = False
        shard.due_at = None
        self.stats.leases_lost += 1
        logger.warning("dispatcher %s lost the lease of %s", self.token, shard.label)

    def _hand_back(self, client: redis.Redis) -> None:
        try:
            self._stopping.set()
            self._nudge_listener(client)
            if self._listener is not None:
                self._listener.join(timeout=BLOCK_SECONDS + 5)
            for shard in self.shards:
                if shard.owned:
                    self._release(client, (shard.keys.lease,), (self.token,))
                    shard.owned = False
            client.zrem(self._members_key, self.token)
        except redis.RedisError as exc:
            logger.warning("dispatcher: could not hand back leases: %s", exc)
