"""What redis-py makes of a Redis URL, without connecting.

The settings checks call this after their own reading of ``REDIS_URL``, so a
URL that only redis-py refuses (a query argument it cannot convert, such as
``?socket_timeout=abc``, or one no connection takes) fails the check, not
the first request that reaches Redis.
"""

from __future__ import annotations

import redis


def client_refusal(url: str) -> str | None:
    """Why redis-py cannot build a connection from ``url``, or None.

    Builds the pool and one connection object as the store will (no socket
    is opened). redis-py's messages name the argument, never its value.
    """
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.make_connection()
    except (ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
