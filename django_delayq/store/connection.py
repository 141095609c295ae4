"""Redis clients built from ``DELAYQ["REDIS_URL"]`` (a single Redis, or any
node of a Redis Cluster with ``["REDIS_CLUSTER"]``), ``["REDIS_SENTINEL"]`` or
the cache of ``CACHE_ALIAS`` (Django's own ``RedisCache``, or django-redis).

Each *role* gets its own connection pool with its own timeouts:

``schedule``
    used on commit by ``schedule()``/``cancel()``/``reschedule()``. Short
    connect and read timeouts (``REDIS_TIMEOUT``) and no client-side retries:
    when Redis is down the caller must not wait, because the outbox takes the
    write instead.

With ``CACHE_ALIAS`` the cache's connection settings (host, password, TLS,
database, connection class) are reused, but not its pool: the cache's
timeouts suit a cache, not a queue.

With ``REDIS_SENTINEL`` each role's client asks the sentinels where the
primary is when it connects, and again when the primary it knew went away
or turned into a replica (a failover): the command that met the old primary
fails like any Redis error, and the loops' retry reaches the new one. The
sentinels are asked with the role's connect timeout, so ``schedule()``
waits at most ``REDIS_TIMEOUT`` per sentinel when they are all down.

With ``REDIS_CLUSTER`` each role's client follows ``MOVED`` and ``ASK``
redirects and re-reads the cluster's slot map when a node fails: see
:mod:`django_delayq.store.cluster`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, TypeAlias

import redis
from django.conf import settings as django_settings
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection
from redis.retry import Retry

from ..conf import DJANGO_REDIS_CACHE, SentinelSettings, Settings, get_settings
from ..exceptions import RedisUnavailable
from .errors import translated
from .namespace import remove_at_exit

#: A client as the store's functions take it: a single Redis, a
#: Sentinel-managed primary's or a Redis Cluster's (which sends the same
#: commands). The rest of the package only hands it over.
Client: TypeAlias = redis.Redis

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_state: tuple[Settings, dict[str, redis.Redis]] | None = None

#: The longest a blocking read (BLPOP, XREADGROUP BLOCK) waits on the server.
BLOCK_SECONDS = 30.0

#: After Redis failed to answer, the schedule path skips it for this long and
#: sends writes straight to the outbox, so a request that schedules several
#: tasks while Redis hangs waits for one timeout, not one per task.
BREAKER_SECONDS = 1.0
#: open breakers: scope (see :func:`breaker_scope`) -> (open until, monotonic;
#: reason)
_breakers: dict[Hashable, tuple[float, str]] = {}

#: The scope of a breaker for every shard at once.
ALL_SHARDS = "*"


def breaker_scope(queue: str, shard: int) -> Hashable:
    """What a failed write to this shard makes the schedule path skip.

    Every shard, on one Redis (they all fail together). On a Redis Cluster
    only this shard: its node may be the one failing over, and the shards of
    the other nodes must still be indexed at once.
    """
    return (queue, shard) if get_settings().cluster else ALL_SHARDS


def trip_breaker(reason: str, scopes: Iterable[Hashable] = (ALL_SHARDS,)) -> None:
    """Note that Redis just failed: skip it for :data:`BREAKER_SECONDS`."""
    until = time.monotonic() + BREAKER_SECONDS
    for scope in scopes:
        _breakers[scope] = (until, reason)


def note_failure(
    exc: BaseException, scopes: Iterable[Hashable] = (ALL_SHARDS,)
) -> None:
    """Trip the breaker if ``exc`` says Redis is unreachable or too slow."""
    if isinstance(exc, RedisUnavailable):
        unreachable = exc.unreachable
    else:
        unreachable = isinstance(exc, redis.ConnectionError | redis.TimeoutError)
    if unreachable:
        trip_breaker(f"{type(exc).__name__}: {exc}", scopes)


def breaker_reason(scopes: Iterable[Hashable] = (ALL_SHARDS,)) -> str | None:
    """Why Redis is being skipped right now for one of ``scopes``, or
    ``None`` to try it."""
    now = time.monotonic()
    for scope in scopes:
        breaker = _breakers.get(scope)
        if breaker is not None and now < breaker[0]:
            return breaker[1]
    return None


#: redis-py names itself to each new connection (``CLIENT SETINFO``, Redis
#: 7.2+; an error it ignores on older servers) unless told not to. Not
#: sent: the ACL user then needs no permission for it, and a connection
#: costs one round trip less. Newer redis-py takes ``driver_info``, older
#: ``lib_name`` and ``lib_version``.
_NO_CLIENT_INFO: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


#: redis-py 8 caps a pool at 100 connections unless told otherwise
#: (``MaxConnectionsError: Too many connections`` past it); earlier
#: releases did not cap it. A worker holds a blocking connection per thread
#: (``--concurrency`` goes to 256) and a web server one per thread serving
#: a request: the threads bound the connections, so the pool need not. A
#: ``max_connections`` in ``REDIS_URL``'s query still wins.
POOL_CONNECTIONS = 2**31 - 1


def _role_options(role: str, settings: Settings) -> dict[str, Any]:
    return {
        **_NO_CLIENT_INFO,
        "max_connections": POOL_CONNECTIONS,
        **_per_role(role, settings),
    }


def _per_role(role: str, settings: Settings) -> dict[str, Any]:
    if role == "schedule":
        return {
            "socket_timeout": settings.redis_timeout,
            "socket_connect_timeout": settings.redis_timeout,
            "retry": Retry(NoBackoff(), 0),
        }
    if role in ("loop", "blocking"):
        # The dispatcher and worker loops handle errors themselves (log,
        # back off, carry on), so the client does not retry behind their
        # back. A blocking read waits at most BLOCK_SECONDS on the server;
        # the socket timeout leaves room for that plus a slow network.
        options: dict[str, Any] = {
            "socket_timeout": 10.0 if role == "loop" else BLOCK_SECONDS + 10.0,
            "socket_connect_timeout": 5.0,
            "socket_keepalive": True,
            "health_check_interval": 30,
            "retry": Retry(NoBackoff(), 0),
        }
        if role == "blocking" and not settings.cluster:
            # Named for whoever reads CLIENT LIST; nothing of ours looks the
            # name up (see BlockingReads).
            options["client_name"] = blocking_client_name()
        return options
    raise ValueError(f"unknown Redis client role {role!r}")


#: (pid, name) of this process's blocking connections: made again in a
#: forked child, whose connections are its own.
_name: tuple[int, str] | None = None


def blocking_client_name() -> str:
    """The name of this process's blocking connections (``CLIENT LIST``):
    ``delayq-blocking-<pid>-<random hex>``. The random part tells apart the
    processes that share a PID: every container's first process is PID 1."""
    global _name
    pid = os.getpid()
    if _name is None or _name[0] != pid:
        _name = (pid, f"delayq-blocking-{pid}-{secrets.token_hex(4)}")
    return _name[1]


#: How long after the first call of :meth:`BlockingReads.end` it closes both
#: sides of a read's socket rather than its writing side only.
HARD_CUT_SECONDS = 1.0


class BlockingReads:
    """Blocking reads that their owner (a worker) can end at once.

    Each read gets a connection of its own from the client's pool for its
    duration (:meth:`reading`), and :meth:`end` shuts those sockets down in
    this process: no command asks the server to end them, so the ACL user
    needs no ``CLIENT`` permission for it, and no read of another process
    (another worker that happens to have the same PID and connection name)
    is ever ended.

    :meth:`end` first closes only the writing side of each socket: the
    server reads the end of the stream, drops the blocked command and closes
    the connection; entries it had delivered just before are sent first, and
    the read returns them as usual. Only if the server does not close within
    :data:`HARD_CUT_SECONDS` (it does not answer) does :meth:`end` close the
    reading side too, and the read fails at once.

    On a Redis Cluster a read goes through the cluster client, which routes
    it to the node of its slot: such a read is not ended, and ends when its
    block times out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: the connections of the reads in progress
        self._open: set[AbstractConnection] = set()
        #: when end() was first called (monotonic), or None
        self._ended: float | None = None

    @property
    def ended(self) -> bool:
        """Whether :meth:`end` was called: reads now return nothing."""
        return self._ended is not None

    @contextlib.contextmanager
    def reading(self, client: redis.Redis) -> Iterator[redis.Redis | None]:
        """A client of one connection of ``client``'s, for one blocking read
        that :meth:`end` can cut short; ``None`` once :meth:`end` was called
        (read nothing). On a Redis Cluster, ``client`` itself."""
        pool = getattr(client, "connection_pool", None)
        if pool is None:  # a cluster client: one pool per node
            yield None if self.ended else client
            return
        bound = _bind(pool)
        connection = bound.connection
        try:
            with self._lock:
                # Connected already (the pool connects what it hands out), so
                # end() finds the socket this read will wait on.
                if connection is not None and self._ended is None:
                    self._open.add(connection)
                    usable: redis.Redis | None = bound
                else:
                    usable = None
            yield usable
        finally:
            with self._lock:
                self._open.discard(connection)
                cut = self._ended is not None
            if cut and connection is not None:
                # end() may have shut its socket down: never back in the pool
                # like that, where the next command would fail on it.
                connection.disconnect()  # type: ignore[no-untyped-call]
            bound.close()

    def end(self) -> int:
        """End the reads in progress, and every later one at once; how many
        were in progress. Called again, it closes what is still open."""
        now = time.monotonic()
        with self._lock:
            if self._ended is None:
                self._ended = now
            how = socket.SHUT_WR
            if now - self._ended >= HARD_CUT_SECONDS:
                how = socket.SHUT_RDWR
            # Under the lock: a read that finished meanwhile has handed its
            # connection back, maybe to another thread's command.
            for connection in self._open:
                _shut(connection, how)
            return len(self._open)


def _shut(connection: AbstractConnection, how: int) -> None:
    # redis-py keeps the socket private: no public call shuts a connection
    # down without closing it, and closing it here, while another thread
    # reads from it, would race with that thread's own clean-up.
    sock = getattr(connection, "_sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            # socket.socket's own: ssl.SSLSocket.shutdown would also drop the
            # TLS state the reading thread is using.
            socket.socket.shutdown(sock, how)


@translated
def _bind(pool: Any) -> redis.Redis:
    """A client holding one connection of ``pool``, connected."""
    return redis.Redis(connection_pool=pool, single_connection_client=True)


def _build(role: str, settings: Settings) -> redis.Redis:
    options = _role_options(role, settings)
    # Members are raw bytes: never decode responses.
    options["decode_responses"] = False
    if settings.cluster:
        assert settings.redis_url is not None
        from .cluster import connect

        return connect(settings.redis_url, options)
    if settings.redis_url is not None:
        pool = redis.ConnectionPool.from_url(settings.redis_url, **options)
        return redis.Redis(connection_pool=pool)
    if settings.sentinel is not None:
        return _sentinel_primary(settings.sentinel, options)
    assert settings.cache_alias is not None
    cache = django_settings.CACHES[settings.cache_alias]
    if cache.get("BACKEND") == DJANGO_REDIS_CACHE:
        return _from_django_cache(cache, options)
    from django_redis import get_redis_connection

    base: redis.Redis = get_redis_connection(settings.cache_alias, write=True)
    base_pool = base.connection_pool
    if type(base_pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        # Sentinel and other managed pools route connections themselves;
        # copying their kwargs would bypass that, so share the client (and
        # its timeouts and retries).
        logger.warning(
            "django-delayq: CACHES[%r] uses %s; its client is shared as is, so "
            'DELAYQ["REDIS_TIMEOUT"] does not apply to it.',
            settings.cache_alias,
            type(base_pool).__name__,
        )
        return base
    kwargs = {**base_pool.connection_kwargs, **options}
    pool = redis.ConnectionPool(connection_class=base_pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


def _from_django_cache(cache: dict[str, Any], options: dict[str, Any]) -> redis.Redis:
    """A client of the server Django's own ``RedisCache`` writes to: the first
    of its ``LOCATION`` URLs, with its ``OPTIONS`` as that cache passes them
    to redis-py (minus what only the cache uses), and our timeouts."""
    location = cache.get("LOCATION", "")
    if isinstance(location, str):
        location = location.replace(";", ",").split(",")
    writer = str(location[0] if location else "").strip()
    extra = {
        key: value
        for key, value in dict(cache.get("OPTIONS") or {}).items()
        if key not in ("pool_class", "parser_class", "serializer")
    }
    pool = redis.ConnectionPool.from_url(writer, **{**extra, **options})
    return redis.Redis(connection_pool=pool)


def _sentinel_primary(
    sentinel: SentinelSettings, options: dict[str, Any]
) -> redis.Redis:
    """A client of the primary the sentinels name, followed across failovers."""
    from redis.sentinel import Sentinel

    timeout = options["socket_connect_timeout"]
    # The sentinels and the data nodes have users of their own, and the
    # same TLS set-up: both connections get the TLS arguments.
    tls = sentinel.tls_kwargs()
    manager = Sentinel(  # type: ignore[no-untyped-call]
        list(sentinel.nodes),
        sentinel_kwargs={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            # redis-py retries a sentinel three times with a backoff by
            # default: seconds per sentinel while none answers, where the
            # role allows REDIS_TIMEOUT and no retry.
            "retry": options["retry"],
            "username": sentinel.sentinel_username,
            "password": sentinel.sentinel_password,
            **_NO_CLIENT_INFO,
            **tls,
        },
    )
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        sentinel.service,
        redis_class=redis.Redis,
        db=sentinel.db,
        username=sentinel.username,
        password=sentinel.password,
        **tls,
        **options,
    )
    return client


@translated
def get_client(role: str = "schedule") -> redis.Redis:
    """Return this process's client for ``role``, rebuilt when settings change.

    Raises :class:`~django_delayq.exceptions.RedisUnavailable` if it cannot
    be built (a Redis Cluster client asks a node for the slot map at once).
    """
    global _state
    settings = get_settings()
    state = _state
    if state is None or state[0] is not settings:
        with _lock:
            if _state is None or _state[0] is not settings:
                _close(_state)
                _state = (settings, {})
                if settings.temporary_prefix:
                    remove_at_exit(settings, lambda: _build("loop", settings))
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
        pool = getattr(client, "connection_pool", None)
        if pool is not None:
            pool.disconnect()
        else:  # a cluster client: one pool per node
            client.close()


def reset() -> None:
    """Drop every client (tests call this after stopping a Redis server)."""
    global _state
    with _lock:
        _close(_state)
        _state = None
        _breakers.clear()
