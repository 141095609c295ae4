"""The ``DELAYQ`` setting, parsed into a typed, immutable object.

Settings are never read at import time: :func:`get_settings` parses them on
first use and caches the result until Django's ``setting_changed`` signal
says ``DELAYQ`` or ``CACHES`` changed (``override_settings`` in tests).

Parsing and the system checks share one validator, :func:`find_problems`, so
``manage.py check`` and a runtime error always say the same thing.

A test run gets a key namespace of its own, as Django gives it a database of
its own: while a test runner has Django's test environment set up
(``manage.py test``, pytest-django), :func:`get_settings` answers with
``TEST_KEY_PREFIX``, or by
default with ``test_<KEY_PREFIX>_<8 hex digits>``, new for each test run
(and ``_<n>`` for the n-th worker of ``test --parallel``, as Django numbers
their databases). The store removes such a namespace's keys when the
process that made it exits.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings as django_settings

from ..exceptions import InvalidConfiguration, UnknownQueue
from .limits import NO_LIMITS, Rule, parse_rate
from .problems import find_problems
from .redis_settings import sentinel_node
from .schema import (
    DEFAULT_QUEUE,
    DEFAULTS,
    SENTINEL_KEYS,
)


@dataclass(frozen=True)
class QueueSettings:
    name: str
    shards: int
    #: the queue-wide limits (``concurrency_limit``, ``rate_limit``)
    limits: Rule = NO_LIMITS


@dataclass(frozen=True)
class SentinelSettings:
    """``DELAYQ["REDIS_SENTINEL"]``: a primary found through Redis Sentinel."""

    service: str
    nodes: tuple[tuple[str, int], ...]
    db: int = 0
    #: the ACL user (and its password) on the primary and the replicas
    username: str | None = None
    password: str | None = None
    #: the ACL user (and its password) on the sentinels
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False
    #: with ``ssl``: the CA file that verifies the servers' certificates
    #: (None: the system's CAs), the client certificate and its key if the
    #: servers ask for one, and redis-py's ``ssl_cert_reqs``
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cert_reqs: str = "required"

    def tls_kwargs(self) -> dict[str, Any]:
        """redis-py's TLS arguments, for the sentinels' connections and the
        primary's alike (nothing without ``ssl``)."""
        if not self.ssl:
            return {"ssl": False}
        return {
            "ssl": True,
            "ssl_ca_certs": self.ssl_ca_certs,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_cert_reqs": self.ssl_cert_reqs,
        }


@dataclass(frozen=True)
class Settings:
    """The parsed ``DELAYQ`` setting."""

    redis_url: str | None
    cache_alias: str | None
    key_prefix: str
    queues: Mapping[str, QueueSettings]
    max_payload_bytes: int
    max_result_bytes: int
    max_attempts: int
    redis_timeout: float
    retry_backoff: float
    retry_backoff_max: float
    visibility_timeout: float
    reconcile_horizon: float
    retain_succeeded: float
    retain_failed: float
    time_limit: float | None = None
    #: ``CANCEL_GRACE``: how long a task cancelled while it runs may go on
    #: before the worker stops it by force
    cancel_grace: float = 10.0
    sentinel: SentinelSettings | None = None
    #: ``REDIS_URL`` names a node of a Redis Cluster
    cluster: bool = False
    #: ``TEST_KEY_PREFIX``, the key prefix of a test run (None: generated)
    test_key_prefix: str | None = None
    #: ``key_prefix`` is a test run's generated namespace, whose keys are
    #: removed when its process exits
    temporary_prefix: bool = False
    #: ``TEST_MODE``: None in production; "manual", "immediate" (or the
    #: dotted path of an indexer class) when the testing toolkit stands in
    #: for Redis (:data:`~django_delayq.conf.schema.TEST_MODES` names them)
    test_mode: str | None = None
    #: ``MIDDLEWARE``: the dotted paths of the middleware around every run
    middleware: tuple[str, ...] = ()

    def queue(self, name: str) -> QueueSettings:
        """Return the settings of queue ``name`` or raise :class:`UnknownQueue`."""
        try:
            return self.queues[name]
        except KeyError:
            known = ", ".join(sorted(self.queues))
            raise UnknownQueue(
                f"queue={name!r} is not configured (configured: {known}). "
                f"Add it to settings.DELAYQ['QUEUES'], e.g. "
                f"'QUEUES': {{{name!r}: {{'shards': 1}}}}."
            ) from None


def raw_settings() -> Any:
    return getattr(django_settings, "DELAYQ", None)


def parse(raw: Any) -> Settings:
    """Build :class:`Settings` from a ``DELAYQ`` value or raise on the first error."""
    errors = [p for p in find_problems(raw) if p.error]
    if errors:
        first = errors[0]
        raise InvalidConfiguration(f"{first.msg} {first.hint} ({first.id})")
    values = {**DEFAULTS, **raw}
    queues = {DEFAULT_QUEUE: QueueSettings(DEFAULT_QUEUE, 1)}
    for name, options in values["QUEUES"].items():
        queues[name] = QueueSettings(
            name,
            options.get("shards", 1),
            Rule(
                options.get("concurrency_limit"),
                parse_rate(options.get("rate_limit"), "rate_limit"),
            ),
        )
    sentinel = None
    if values["REDIS_SENTINEL"] is not None:
        options = {**SENTINEL_KEYS, **values["REDIS_SENTINEL"]}
        sentinel = SentinelSettings(
            service=options["SERVICE"],
            nodes=tuple(
                node
                for node in map(sentinel_node, options["NODES"])
                if node is not None
            ),
            db=options["DB"],
            username=options["USERNAME"],
            password=options["PASSWORD"],
            sentinel_username=options["SENTINEL_USERNAME"],
            sentinel_password=options["SENTINEL_PASSWORD"],
            ssl=options["SSL"],
            ssl_ca_certs=_path(options["SSL_CA_CERTS"]),
            ssl_certfile=_path(options["SSL_CERTFILE"]),
            ssl_keyfile=_path(options["SSL_KEYFILE"]),
            ssl_cert_reqs=options["SSL_CERT_REQS"],
        )
    return Settings(
        redis_url=values["REDIS_URL"],
        cache_alias=values["CACHE_ALIAS"],
        sentinel=sentinel,
        cluster=values["REDIS_CLUSTER"],
        key_prefix=values["KEY_PREFIX"],
        test_key_prefix=values["TEST_KEY_PREFIX"],
        queues=queues,
        max_payload_bytes=values["MAX_PAYLOAD_BYTES"],
        max_result_bytes=values["MAX_RESULT_BYTES"],
        max_attempts=values["MAX_ATTEMPTS"],
        redis_timeout=float(values["REDIS_TIMEOUT"]),
        retry_backoff=float(values["RETRY_BACKOFF"]),
        retry_backoff_max=float(values["RETRY_BACKOFF_MAX"]),
        visibility_timeout=float(values["VISIBILITY_TIMEOUT"]),
        reconcile_horizon=float(values["RECONCILE_HORIZON"]),
        retain_succeeded=float(values["RETAIN_SUCCEEDED"]),
        retain_failed=float(values["RETAIN_FAILED"]),
        time_limit=(
            None if values["TIME_LIMIT"] is None else float(values["TIME_LIMIT"])
        ),
        cancel_grace=float(values["CANCEL_GRACE"]),
        test_mode=values["TEST_MODE"],
        middleware=tuple(values["MIDDLEWARE"]),
    )


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


_lock = threading.Lock()
_cached: Settings | None = None
#: The settings of this process's test run: (parsed settings, process id,
#: the same with the test run's key prefix)
_test_run: tuple[Settings, int, Settings] | None = None
#: The random part of this test run's namespace: drawn once, so that the
#: processes django-delayq forks during a test run (worker processes, a
#: metrics server) share it
_test_token: str | None = None


def get_settings() -> Settings:
    """Return the parsed ``DELAYQ`` setting, parsing it on first use.

    During a test run the key prefix is the test run's (see the module's
    docstring); the object returned stays the same until settings change.
    """
    global _cached
    current = _cached
    if current is None:
        with _lock:
            if _cached is None:
                _cached = parse(raw_settings())
            current = _cached
    if in_test_run():
        return _for_test_run(current)
    return current


def in_test_run() -> bool:
    """Whether this process runs tests: a test runner has set up Django's
    test environment.

    ``setup_test_environment()``, which Django's test runner and
    pytest-django call before any test and undo after the last, keeps what
    it changed in ``_TestState.saved_data``; nothing public says so. That
    alone is no test run: Django's tutorial calls it in ``manage.py shell``
    to use the test client, against the real database, whose tasks must
    reach the real namespace (a throwaway one would leave them to the
    sweeper). A test run also has its runner loaded: Django's
    (``manage.py test`` and its ``--parallel`` workers, custom runners,
    which subclass it) or pytest. Looked up in ``sys.modules`` so that a
    process that never imported them pays nothing.
    """
    utils = sys.modules.get("django.test.utils")
    state = getattr(utils, "_TestState", None)
    if state is None or not hasattr(state, "saved_data"):
        return False
    return "django.test.runner" in sys.modules or "_pytest" in sys.modules


def _for_test_run(current: Settings) -> Settings:
    global _test_run
    pid = os.getpid()
    known = _test_run
    if known is None or known[0] is not current or known[1] != pid:
        with _lock:
            known = _test_run
            if known is None or known[0] is not current or known[1] != pid:
                known = _test_run = (current, pid, _with_test_prefix(current, pid))
    return known[2]


def _with_test_prefix(current: Settings, pid: int) -> Settings:
    global _test_token
    pinned = current.test_key_prefix
    if pinned is not None:
        # Emptied at the end like a generated one, so that the next run's
        # database can claim it (delayq.E014), unless it is the project's
        # own prefix: then the Redis is the tests' own, or it is a mistake
        # whose keys must not be deleted.
        return replace(
            current, key_prefix=pinned, temporary_prefix=pinned != current.key_prefix
        )
    if _test_token is None:
        _test_token = secrets.token_hex(4)
    # The workers of `test --parallel` each get a namespace of their own, as
    # each gets a database of its own (Django numbers them from 1).
    worker = getattr(sys.modules.get("django.test.runner"), "_worker_id", 0)
    token = f"{_test_token}_{worker}" if worker else _test_token
    prefix = f"test_{current.key_prefix}_{token}"
    return replace(current, key_prefix=prefix, temporary_prefix=True)


def reset(**kwargs: Any) -> None:
    """Forget the parsed settings (a ``setting_changed`` receiver)."""
    global _cached
    if kwargs.get("setting", "DELAYQ") in ("DELAYQ", "CACHES"):
        with _lock:
            _cached = None
