"""The benchmark task that every peer runs: :func:`record`.

It takes the time first, then does the work: with ``DELAYQ_PEER_ROW_URL``
set (the harness sets it), it inserts one row into ``bench_row`` of that
PostgreSQL database, in a transaction of its own, as django-delayq's
``write_row`` task does with the ORM. Then it RPUSHes
``"<index> <due> <started>"`` to a list named after the scenario on the
recorder, a redis-server of its own, so that the measured Redis sees only
the peer's traffic.

Standard library and psycopg only (psycopg imported when a row is to be
written): RQ's default worker runs each task in a forked work horse, which
then opens its own database connection, as any RQ task that writes does.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, BinaryIO
from urllib.parse import urlsplit

RECORDER_URL_ENV = "DELAYQ_PEER_RECORDER_URL"
#: The database whose ``bench_row`` table the task writes its row to.
ROW_URL_ENV = "DELAYQ_PEER_ROW_URL"
#: The table's definition: django-delayq's ``BenchRow``.
ROW_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS bench_row (id bigserial PRIMARY KEY, n bigint NOT NULL)"
)

if os.environ.get(ROW_URL_ENV):
    # Imported with the module, before any work horse forks.
    import psycopg

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


def _row_connection() -> Any:
    conn = getattr(_local, "rows", None)
    if conn is None or conn[0] != os.getpid():
        conn = (os.getpid(), psycopg.connect(os.environ[ROW_URL_ENV], autocommit=True))
        _local.rows = conn
    return conn[1]


def record(tag: str, index: int, due: float) -> None:
    """The benchmark task: note when it started, relative to when it was due.

    It speaks RESP on a plain socket rather than through redis-py, whose new
    connections cost milliseconds (a package-metadata lookup each): a peer
    that starts a process per task (RQ's fork) would pay that per task, and
    the trivial task must stay trivial.
    """
    started = time.time()
    if os.environ.get(ROW_URL_ENV):
        _row_connection().execute("INSERT INTO bench_row (n) VALUES (%s)", (index,))
    entry = f"{int(index)} {float(due)!r} {started!r}".encode()
    sock, reader = _connection()
    sock.sendall(_command(b"RPUSH", samples_key(tag).encode(), entry))
    reply = reader.readline()
    if not reply.startswith(b":"):
        raise RuntimeError(f"recorder RPUSH failed: {reply!r}")
