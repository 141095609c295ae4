"""Waking a sleeping dispatcher when a task becomes its shard's new head.

``schedule()`` pushes to the shard's wake list (in the same script as its
``ZADD``) when the new task is due before every other one. A dispatcher's
:class:`WakeListener` blocks on the wake lists of the shards it owns with a
long server-side timeout, and wakes the main loop as soon as one is pushed:
idle, it costs one command per block, and a new earliest task is moved on
time instead of after the loop's longest sleep.

On a single Redis one thread blocks on every owned shard's list with one
``BLPOP``. On a Redis Cluster a ``BLPOP`` may only name keys of one slot,
and each shard is a slot of its own (possibly on another node), so there is
one thread per shard, each blocking on its own list: the same one command
per ``BLOCK_SECONDS`` per shard when idle, and no polling.

One more thread blocks on the handover list of the dispatchers serving the
same queues, which a dispatcher that stops gracefully pushes to after
handing its shards back: the others take them over at once instead of at
their next lease check (a rolling restart adds no lateness).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..store import wake_lists
from ..store.backoff import Backoff
from ..store.connection import BLOCK_SECONDS, Client, get_client
from .leases import Shard

logger = logging.getLogger(__name__)

#: How long a stopping dispatcher waits for its handover thread.
HANDOVER_JOIN = 1.0


class WakeListener:
    """Blocks on the owned shards' wake lists; sets ``wake`` on a push.

    :param wake: set when a shard was woken (and by :meth:`nudge`).
    :param stopping: the dispatcher's stop event; the listener ends with it.
    :param idle_wait: how long to wait for a lease while the dispatcher owns
        no shard.
    :param handover: the handover list to block on (None: none).
    """

    def __init__(
        self,
        shards: Sequence[Shard],
        *,
        wake: threading.Event,
        stopping: threading.Event,
        idle_wait: float,
        handover: str | None = None,
    ) -> None:
        self.shards = shards
        self.wake = wake
        self.stopping = stopping
        self.idle_wait = idle_wait
        # Shards one BLPOP may name together: all of them on one Redis, each
        # alone on a cluster (one slot per shard).
        together = (
            [list(shards)]
            if not get_settings().cluster
            else [[shard] for shard in shards]
        )
        self._groups = [_Group(self, group) for group in together]
        #: wake lists pushed, handed to the main loop under a lock (the main
        #: loop alone writes ``Shard.due_at``)
        self._woken: set[str] = set()
        self._woken_lock = threading.Lock()
        self._handover = handover
        self._handed_over = threading.Event()
        self._handover_thread: threading.Thread | None = None

    def start(self) -> None:
        for number, group in enumerate(self._groups):
            group.start(f"delayq-dispatch-wake-{number}")
        if self._handover is not None:
            self._handover_thread = threading.Thread(
                target=self._wait_for_handovers,
                args=(self._handover,),
                name="delayq-dispatch-handover",
                daemon=True,
            )
            self._handover_thread.start()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran (a ``--once`` pass starts no listener)."""
        return self._handover_thread is not None or any(g.started for g in self._groups)

    def handed_over(self, *, clear: bool = True) -> bool:
        """Whether another dispatcher handed shards back since the last call
        that cleared it."""
        handed_over = self._handed_over.is_set()
        if clear:
            self._handed_over.clear()
        return handed_over

    def woken(self) -> set[str]:
        """The wake lists pushed since the last call."""
        with self._woken_lock:
            woken, self._woken = self._woken, set()
        return woken

    def nudge(self, client: Client) -> None:
        """Make the threads re-read the owned shards (or see that we stop).

        A push to a wake list a thread blocks on returns its BLPOP now; the
        cost is one extra drain of that shard.
        """
        for group in self._groups:
            group.nudge(client)

    def join(self) -> None:
        """Wait for the threads to end, after ``stopping`` and a nudge.

        The handover thread is woken by this dispatcher's own handover push
        (see :meth:`Leases.release_all`), or left to end with the process:
        nothing else is waiting for it.
        """
        for group in self._groups:
            group.join()
        if self._handover_thread is not None:
            self._handover_thread.join(timeout=HANDOVER_JOIN)

    def _woke(self, name: str) -> None:
        with self._woken_lock:
            self._woken.add(name)
        self.wake.set()

    def _wait_for_handovers(self, key: str) -> None:
        client = get_client("blocking")
        backoff = _quiet_backoff("dispatcher handover listener")
        while not self.stopping.is_set():
            try:
                pushed = wake_lists.wait(client, [key], BLOCK_SECONDS)
                backoff.answered()
            except RedisUnavailable as exc:
                self.stopping.wait(backoff.failed(exc))
                continue
            if pushed is None:
                continue
            if self.stopping.is_set():
                # Meant for a dispatcher that goes on: put it back (the push
                # this dispatcher made for itself is one more, see
                # Leases.release_all).
                wake_lists.wake(client, key)
                return
            self._handed_over.set()
            self.wake.set()


class _Group:
    """One thread blocking on the wake lists of some shards."""

    def __init__(self, listener: WakeListener, shards: Sequence[Shard]) -> None:
        self.listener = listener
        self.shards = shards
        self._leases_changed = threading.Event()
        #: the wake lists the thread is blocked on right now
        self._listening: list[str] = []
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._listen, name=name, daemon=True)
        self._thread.start()

    def nudge(self, client: Client) -> None:
        self._leases_changed.set()
        listening = self._listening
        if self._thread is not None and listening:
            wake_lists.wake(client, listening[0])

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=BLOCK_SECONDS + 5)

    def _listen(self) -> None:
        listener = self.listener
        client = get_client("blocking")
        backoff = _quiet_backoff("dispatcher listener")
        while not listener.stopping.is_set():
            self._leases_changed.clear()
            by_key = {s.keys.wake: s for s in self.shards if s.owned}
            if not by_key:
                self._listening = []
                self._leases_changed.wait(listener.idle_wait)
                continue
            self._listening = list(by_key)
            if listener.stopping.is_set() or self._leases_changed.is_set():
                # A nudge that came before the lists above were published
                # pushed to none of them (nudge() sets the flag first, then
                # reads them): blocking now would wait out BLOCK_SECONDS,
                # and a stopping dispatcher with it.
                continue
            try:
                name = wake_lists.wait(client, self._listening, BLOCK_SECONDS)
                if name is not None:
                    if by_key[name].owned:
                        listener._woke(name)
                    else:
                        # Handed back while we were blocked: the wake-up is
                        # for the shard's new owner, so put it back.
                        wake_lists.wake(client, name)
                backoff.answered()
            except RedisUnavailable as exc:
                listener.stopping.wait(backoff.failed(exc))


def _quiet_backoff(who: str) -> Backoff:
    """A listener's errors: at DEBUG level (the loop logs the outage, and a
    listener sees it again on every try), with no line when it is over."""
    return Backoff(who, logger, level=logging.DEBUG, again=None)
