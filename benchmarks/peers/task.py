"""The benchmark task that every peer runs: :func:`record`.

It takes the time first, then RPUSHes ``"<index> <due> <started>"`` to a list
named after the scenario on the recorder, a redis-server of its own, so that
the measured Redis sees only the peer's traffic.

Standard library only: RQ's default worker imports this module again in
every forked work horse, and the trivial task must stay trivial.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import BinaryIO
from urllib.parse import urlsplit

RECORDER_URL_ENV = "DELAYQ_PEER_RECORDER_URL"

# One connection per thread of each process: Dramatiq runs tasks on 8
# threads that must not interleave on one socket, and a forked worker (RQ's
# work horse, Celery's pool) must not use a socket its parent opened.
_local = threading.local()


def samples_key(tag: str) -> str:
    return f"samples:{tag}"


def _connection() -> tuple[socket.socket, BinaryIO]:
    conn: tuple[int, socket.socket, BinaryIO] | None = getattr(_local, "conn", None)
    if conn is None or conn[0] != os.getpid():
        url = urlsplit(os.environ[RECORDER_URL_ENV])
        sock = socket.create_connection((url.hostname, url.port or 6379), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = (os.getpid(), sock, sock.makefile("rb"))
        _local.conn = conn
    return conn[1], conn[2]


def _command(*parts: bytes) -> bytes:
    """A RESP request: the recorder needs one command and no client library."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


def record(tag: str, index: int, due: float) -> None:
    """The benchmark task: note when it started, relative to when it was due.

    It speaks RESP on a plain socket rather than through redis-py, whose new
    connections cost milliseconds (a package-metadata lookup each): a peer
    that starts a process per task (RQ's fork) would pay that per task, and
    the trivial task must stay trivial.
    """
    started = time.time()
    entry = f"{int(index)} {float(due)!r} {started!r}".encode()
    sock, reader = _connection()
    sock.sendall(_command(b"RPUSH", samples_key(tag).encode(), entry))
    reply = reader.readline()
    if not reply.startswith(b":"):
        raise RuntimeError(f"recorder RPUSH failed: {reply!r}")
