"""The concurrency slots a worker process holds for the tasks it runs under
limits (see :mod:`django_delayq.limits`).

A delivery from a limits shard's stream was admitted with its slots taken
(a lease of :data:`~django_delayq.store.limits.LEASE_MS`). Before a thread
claims it, :meth:`Slots.confirm` checks that it still holds them: a lease
that lapsed (the delivery waited too long, or its worker froze) may have
gone to another task, and the delivery then goes back to wait for
admission. The main thread renews the leases of every delivery this
process holds each :data:`~django_delayq.store.limits.RENEW_EVERY` s, so a
process that dies frees them within a lease; the end of an attempt
releases them at once, which admits the next waiting tasks.

A rate limit counts the moment a task's function starts:
:func:`note_start` (called just before the function) keeps it, the main
thread reports the moments within :data:`REPORT_EVERY`, and a release
reports those not yet reported.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..conf import get_settings
from ..conf.limits import Rule
from ..exceptions import RedisUnavailable
from ..store import limits, scripts, streams
from ..store.connection import Client
from ..store.keys import LIMITS_SHARD, ShardKeys
from ..transitions import delivery_of
from .groups import rules_of

logger = logging.getLogger(__name__)

#: Seconds between the main thread's reports of functions started: well
#: within the shortest rate period, so that a start is counted at its
#: moment before the token reserved for it would be the one to lapse.
REPORT_EVERY = 0.25


class _Starts:
    """When each function under limits started, by delivery, until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: delivery (stream entry id) -> epoch ms, not yet reported
        self.unreported: dict[str, int] = {}
        #: delivery -> epoch ms, reported (or being reported) and not yet
        #: released: a release sends the moment again, so that a release
        #: that reaches Redis before the report still counts the start
        self.reported: dict[str, int] = {}
        #: whether a worker of this process serves a limits shard
        self.recording = False

    def started(self, entry: str) -> int | None:
        """When the function of a delivery released now started (None: it
        did not), no longer kept; under the lock."""
        unreported = self.unreported.pop(entry, None)
        reported = self.reported.pop(entry, None)
        return unreported if unreported is not None else reported


_starts = _Starts()


def note_start(row: Any) -> None:
    """Keep the moment the function of a claimed row starts (now), if it
    was delivered by a limits shard's stream (see :mod:`django_delayq.limits.slots`)."""
    if not _starts.recording or row.shard != LIMITS_SHARD:
        return
    entry = delivery_of(row.claim_entry)
    with _starts.lock:
        _starts.unreported[entry] = int(time.time() * 1000)


class Slots:
    """The slots held by one worker process, by delivery."""

    def __init__(self, shards: Iterable[ShardKeys]) -> None:
        #: each limits shard's ready stream -> its keys
        self.by_stream = {keys.ready: keys for keys in shards if keys.limited}
        if self.by_stream:
            _starts.recording = True
        self._held: dict[ShardKeys, set[str]] = defaultdict(set)
        self._lock = threading.Lock()

    def limited(self, entry: streams.Entry) -> ShardKeys | None:
        return self.by_stream.get(entry.stream)

    @functools.cache  # noqa: B019 - one per worker process, as long as it
    def rules(self, queue: str) -> dict[str, Rule]:
        return rules_of(get_settings().queue(queue))

    def confirm(
        self, client: Client, entries: Sequence[streams.Entry]
    ) -> list[streams.Entry]:
        """Those of ``entries`` from a limits shard whose slots lapsed: they
        were put back to wait, and are the caller's to acknowledge. The
        others hold their slots, renewed, from now until released."""
        refused: list[streams.Entry] = []
        for keys, group in self._by_shard(entries).items():
            held = limits.confirm(
                client,
                keys,
                self.rules(keys.queue),
                [(e.entry_id.decode(), e.task_id) for e in group if e.task_id],
            )
            deliveries = [e for e in group if e.task_id]
            with self._lock:
                for entry, ok in zip(deliveries, held, strict=True):
                    if ok:
                        self._held[keys].add(entry.entry_id.decode())
                    else:
                        refused.append(entry)
        return refused

    def release_calls(self, entries: Iterable[streams.Entry]) -> list[scripts.Call]:
        """The script calls that release the slots of ``entries`` (those
        this process holds), for the caller to send with their
        acknowledgement; from now on they are the caller's to send (if the
        call fails, the leases lapse on their own)."""
        calls = []
        for keys, ended in self._take(entries).items():
            call = limits.release_call(keys, self.rules(keys.queue), ended)
            if call is not None:
                calls.append(call)
        return calls

    def _take(
        self, entries: Iterable[streams.Entry]
    ) -> dict[ShardKeys, list[tuple[str, int | None]]]:
        """The held deliveries among ``entries``, with when their functions
        started, no longer held nor reported by this process."""
        found: dict[ShardKeys, list[tuple[str, int | None]]] = {}
        for keys, group in self._by_shard(entries).items():
            with self._lock:
                held = self._held[keys]
                ids = [e.entry_id.decode() for e in group]
                ids = [i for i in ids if i in held]
                held.difference_update(ids)
            if ids:
                with _starts.lock:
                    found[keys] = [(i, _starts.started(i)) for i in ids]
        return found

    def release(self, client: Client, entries: Iterable[streams.Entry]) -> None:
        """Free the slots of deliveries this process is done with (their
        outcome committed, or left to another); admits what now fits. A
        failure is logged: the leases then lapse on their own."""
        for keys, ended in self._take(entries).items():
            try:
                limits.release(client, keys, self.rules(keys.queue), ended)
            except RedisUnavailable as exc:
                logger.warning(
                    "worker: could not release %d slot(s) on %s (%s); they "
                    "come back when their lease lapses",
                    len(ended),
                    keys.queue,
                    exc,
                )

    def report_starts(self, client: Client) -> None:
        """Report the functions started since the last report (from the
        main thread)."""
        with _starts.lock:
            if not _starts.unreported:
                return
            starts, _starts.unreported = _starts.unreported, {}
            _starts.reported.update(starts)
        by_keys: dict[ShardKeys, list[tuple[str, int]]] = defaultdict(list)
        with self._lock:
            for entry, ms in starts.items():
                for keys, ids in self._held.items():
                    if entry in ids:
                        by_keys[keys].append((entry, ms))
                        break
        for keys, found in by_keys.items():
            try:
                limits.started(client, keys, self.rules(keys.queue), found)
            except RedisUnavailable:
                with _starts.lock:  # reported with the release, or later
                    for entry, ms in found:
                        _starts.unreported.setdefault(entry, ms)
                raise

    def renew(self, client: Client) -> None:
        """Renew the leases of every slot held (from the main thread)."""
        with self._lock:
            held = {keys: list(ids) for keys, ids in self._held.items() if ids}
        for keys, ids in held.items():
            limits.renew(client, keys, self.rules(keys.queue), ids)

    def _by_shard(
        self, entries: Iterable[streams.Entry]
    ) -> dict[ShardKeys, list[streams.Entry]]:
        found: dict[ShardKeys, list[streams.Entry]] = defaultdict(list)
        for entry in entries:
            keys = self.by_stream.get(entry.stream)
            if keys is not None:
                found[keys].append(entry)
        return found
