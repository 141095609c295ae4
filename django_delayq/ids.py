"""Time-ordered task ids (UUID version 7, RFC 9562), and the names a
dispatcher, a worker or a sweeper process goes by."""

from __future__ import annotations

import os
import socket
import time
import uuid


def uuid7() -> uuid.UUID:
    """Return a new UUIDv7: 48 bits of Unix milliseconds, then 74 random bits.

    Time-ordered ids keep B-tree inserts at the right edge of the primary key
    index (cheap inserts, good locality) and sort tasks by creation in the
    admin. Python 3.14 has ``uuid.uuid7``; we support older versions.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a: 12 bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & 0x3FFF_FFFF_FFFF_FFFF  # rand_b: 62 bits
    return uuid.UUID(int=value)


def shard_of(task_id: uuid.UUID, shards: int) -> int:
    """Return the shard a task id belongs to: a stable function of the id.

    The low 62 bits of a UUIDv7 are random, so they spread ids evenly.
    """
    return (task_id.int & 0x3FFF_FFFF_FFFF_FFFF) % shards


def process_name(random_digits: int = 6) -> str:
    """A name for this process, unique across hosts and restarts:
    ``<host>:<pid>:<random hex digits>``, e.g. ``web-1:401:1a2b3c``.

    It is written in the keys the process holds (a dispatcher's shard
    leases, a worker's consumers, the sweep lock) and shown by the dashboard
    and ``delayq_status``; a dispatcher's has 8 random digits, the others 6.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:random_digits]}"
