"""Redis clients built from ``DELAYQ["REDIS_URL"]`` or a django-redis cache.

Each *role* gets its own connection pool with its own timeouts:

``schedule``
    used on commit by ``schedule()``/``cancel()``/``reschedule()``. Short
    connect and read timeouts (``REDIS_TIMEOUT``) and no client-side retries:
    when Redis is down the caller must not wait, because the outbox takes the
    write instead.

With ``CACHE_ALIAS`` the cache's connection settings (host, password, TLS,
database, connection class) are reused, but not its pool: the cache's
timeouts suit a cache, not a queue.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..conf import Settings, get_settings

_lock = threading.Lock()
_state: tuple[Settings, dict[str, redis.Redis]] | None = None


def _role_options(role: str, settings: Settings) -> dict[str, Any]:
    if role == "schedule":
        return {
            "socket_timeout": settings.redis_timeout,
            "socket_connect_timeout": settings.redis_timeout,
            "retry": Retry(NoBackoff(), 0),
        }
    raise ValueError(f"unknown Redis client role {role!r}")


def _build(role: str, settings: Settings) -> redis.Redis:
    options = _role_options(role, settings)
    # Members are raw bytes: never decode responses.
    options["decode_responses"] = False
    if settings.redis_url is not None:
        pool = redis.ConnectionPool.from_url(settings.redis_url, **options)
        return redis.Redis(connection_pool=pool)
    from django_redis import get_redis_connection

    assert settings.cache_alias is not None
    base: redis.Redis = get_redis_connection(settings.cache_alias, write=True)
    base_pool = base.connection_pool
    if type(base_pool) is not redis.ConnectionPool:
        # Sentinel and other managed pools route connections themselves;
        # copying their kwargs would bypass that, so share the client.
        return base
    kwargs = {**base_pool.connection_kwargs, **options}
    pool = redis.ConnectionPool(connection_class=base_pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


def get_client(role: str = "schedule") -> redis.Redis:
    """Return this process's client for ``role``, rebuilt when settings change."""
    global _state
    settings = get_settings()
    state = _state
    if state is None or state[0] is not settings:
        with _lock:
            if _state is None or _state[0] is not settings:
                _close(_state)
                _state = (settings, {})
            state = _state
    clients = state[1]
    client = clients.get(role)
    if client is None:
        with _lock:
            client = clients.get(role)
            if client is None:
                client = clients[role] = _build(role, settings)
    return client


def _close(state: tuple[Settings, dict[str, redis.Redis]] | None) -> None:
    if state is None:
        return
    for client in state[1].values():
        client.connection_pool.disconnect()


def reset() -> None:
    """Drop every client (tests call this after stopping a Redis server)."""
    global _state
    with _lock:
        _close(_state)
        _state = None
