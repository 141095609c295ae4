"""What a worker process is running, readable by its supervisor after it died.

A process killed by a task (``os._exit()``, a crash in C code, the kernel's
out-of-memory killer) says nothing on its way out, and its database session
rolls back whatever it had not committed. The supervisor still has to know
two things to sort out what the process held at once (see
:mod:`django_delayq.supervisor.rescue`): the worker's name, which names its consumers
in the ready streams' groups, and which tasks' functions were running at
the moment it died.

A :class:`Board` is a page of memory the supervisor maps shared before it
forks the worker process. The worker writes its name once, and each thread
writes the id of the task whose function it runs, with its time limit and
deadline, into a slot of its own as the function starts, and clears it as
it returns: a few bytes copied, no system call, no lock held across the
task.

The supervisor reads the whole page once the process is gone. While it
runs, it reads only the deadlines, to enforce time limits where the
worker cannot: a task that holds the GIL in C code (a regular expression
backtracking without end, say) starves the worker's own watchdog thread.
Such a reading may catch a slot half-written, so the supervisor acts only
on what two readings a second apart agree on.
"""

from __future__ import annotations

import math
import mmap
import struct
import threading
import uuid
from dataclasses import dataclass

#: A worker runs at most this many threads (``--concurrency``).
SLOTS = 256

_NAME_SIZE = 256  # a two-byte length, then the UTF-8 name
#: after a flag byte: the task id, its deadline (``time.monotonic()``, the
#: same clock in every process of a machine) and its limit, in seconds; a
#: task without a limit has infinite ones
_TASK = struct.Struct("<16sdd")
_SLOT_SIZE = 1 + _TASK.size
_RUNNING = 1


@dataclass(frozen=True)
class Running:
    """A task whose function a thread of the worker is running."""

    task_id: uuid.UUID
    deadline: float
    limit: float


@dataclass(frozen=True)
class Snapshot:
    """What the board said when it was read."""

    #: the worker's name; empty if it died before it started working
    worker: str
    #: the tasks whose functions were running
    running: frozenset[uuid.UUID]


class Board:
    """One worker process's board, shared with its supervisor."""

    def __init__(self) -> None:
        # Anonymous and MAP_SHARED: a forked child writes the very pages
        # its parent reads.
        self._memory = mmap.mmap(-1, _NAME_SIZE + SLOTS * _SLOT_SIZE)
        self._slots: dict[int, int] = {}  # thread ident -> slot, in the child
        self._lock = threading.Lock()

    # -- in the worker process ---------------------------------------------

    def announce(self, worker: str) -> None:
        """Write the worker's name (it names the worker's stream consumers)."""
        name = worker.encode()[: _NAME_SIZE - 2]
        self._memory[2 : 2 + len(name)] = name
        self._memory[0:2] = len(name).to_bytes(2, "big")

    def started(self, task_id: uuid.UUID, deadline: float, limit: float | None) -> None:
        """The calling thread starts running the function of ``task_id``, to
        end by ``deadline`` (``time.monotonic()``; ``inf``: no limit)."""
        offset = self._slot(threading.get_ident())
        if offset is None:
            return
        # The task first, then the flag: a process killed between the two
        # leaves a slot that names no task, never a wrong one.
        limit = math.inf if limit is None else limit
        _TASK.pack_into(self._memory, offset + 1, task_id.bytes, deadline, limit)
        self._memory[offset] = _RUNNING

    def finished(self, thread: int | None = None) -> None:
        """The function of the calling thread (or of ``thread``) returned or
        raised, or the worker gave up on it."""
        offset = self._slot(threading.get_ident() if thread is None else thread)
        if offset is not None:
            self._memory[offset] = 0

    def _slot(self, ident: int) -> int | None:
        slot = self._slots.get(ident)
        if slot is None:
            with self._lock:
                slot = self._slots.setdefault(ident, len(self._slots))
        if slot >= SLOTS:
            return None
        return _NAME_SIZE + slot * _SLOT_SIZE

    # -- in the supervisor --------------------------------------------------

    def running(self) -> list[Running]:
        """The tasks running now (while the process lives: see above)."""
        memory = self._memory
        tasks = []
        for slot in range(SLOTS):
            offset = _NAME_SIZE + slot * _SLOT_SIZE
            if memory[offset] == _RUNNING:
                task, deadline, limit = _TASK.unpack_from(memory, offset + 1)
                tasks.append(Running(uuid.UUID(bytes=task), deadline, limit))
        return tasks

    def read(self) -> Snapshot:
        """What the process wrote, once it has exited."""
        length = int.from_bytes(self._memory[0:2], "big")
        worker = self._memory[2 : 2 + length].decode(errors="replace")
        return Snapshot(worker, frozenset(task.task_id for task in self.running()))

    def close(self) -> None:
        self._memory.close()
