"""The ``DELAYQ`` setting, parsed into a typed, immutable object.

Settings are never read at import time: :func:`get_settings` parses them on
first use and caches the result until Django's ``setting_changed`` signal
says ``DELAYQ`` or ``CACHES`` changed (``override_settings`` in tests).

Parsing and the system checks share one validator, :func:`find_problems`, so
``manage.py check`` and a runtime error always say the same thing.
"""

from __future__ import annotations

import difflib
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as django_settings

from . import check_ids
from .exceptions import InvalidConfiguration, UnknownQueue
from .text import short_repr

DEFAULT_QUEUE = "default"

#: Every key ``DELAYQ`` understands, with its default.
DEFAULTS: dict[str, Any] = {
    "REDIS_URL": None,
    "CACHE_ALIAS": None,
    "REDIS_SENTINEL": None,
    "REDIS_CLUSTER": False,
    "KEY_PREFIX": "delayq",
    "QUEUES": {},
    "MAX_PAYLOAD_BYTES": 64 * 1024,
    "MAX_RESULT_BYTES": 64 * 1024,
    "MAX_ATTEMPTS": 3,
    "REDIS_TIMEOUT": 0.25,
    "RETRY_BACKOFF": 2.0,
    "RETRY_BACKOFF_MAX": 3600.0,
    "VISIBILITY_TIMEOUT": 300.0,
    "RECONCILE_HORIZON": 600.0,
    "RETAIN_SUCCEEDED": 7 * 86400.0,
    "RETAIN_FAILED": 30 * 86400.0,
    "TIME_LIMIT": None,
}

#: The longest time limit a task may have (a week).
MAX_TIME_LIMIT = 7 * 86400.0

_QUEUE_KEYS = {"shards"}
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_CONNECTION_KEYS = ("REDIS_URL", "CACHE_ALIAS", "REDIS_SENTINEL")
#: Django's built-in Redis cache backend, which CACHE_ALIAS may name.
DJANGO_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
#: REDIS_SENTINEL's keys, with their defaults (None: required)
_SENTINEL_KEYS: dict[str, Any] = {
    "SERVICE": None,
    "NODES": None,
    "DB": 0,
    "PASSWORD": None,
    "SENTINEL_PASSWORD": None,
    "SSL": False,
}
_SENTINEL_EXAMPLE = (
    '"REDIS_SENTINEL": {"SERVICE": "mymaster", "NODES": ["10.0.0.1:26379", '
    '"10.0.0.2:26379", "10.0.0.3:26379"]}'
)
_MAX_SHARDS = 1024


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings, as a system check reports it."""

    id: str
    msg: str
    hint: str
    error: bool = True


@dataclass(frozen=True)
class QueueSettings:
    name: str
    shards: int


@dataclass(frozen=True)
class SentinelSettings:
    """``DELAYQ["REDIS_SENTINEL"]``: a primary found through Redis Sentinel."""

    service: str
    nodes: tuple[tuple[str, int], ...]
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False


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
    sentinel: SentinelSettings | None = None
    #: ``REDIS_URL`` names a node of a Redis Cluster
    cluster: bool = False

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


def find_problems(raw: Any) -> list[Problem]:
    """Return everything wrong with a ``DELAYQ`` value (empty when it is valid)."""
    example = "DELAYQ = {'REDIS_URL': 'redis://127.0.0.1:6379/0'}"
    if raw is None:
        return [
            Problem(
                check_ids.CONNECTION,
                "settings.DELAYQ is not set, so django-delayq has no Redis connection.",
                f"Add {example}, or point CACHE_ALIAS at a django-redis cache.",
            )
        ]
    if not isinstance(raw, Mapping):
        return [
            Problem(
                check_ids.NOT_A_DICT,
                f"settings.DELAYQ must be a dict, not {type(raw).__name__}.",
                f"Use {example}.",
            )
        ]
    problems = [*_unknown_keys(raw), *_connection_problems(raw)]
    problems += _queue_problems(raw.get("QUEUES", DEFAULTS["QUEUES"]))
    problems += _number_problems(raw)
    prefix = raw.get("KEY_PREFIX", DEFAULTS["KEY_PREFIX"])
    if not isinstance(prefix, str) or not _KEY_PREFIX.match(prefix):
        problems.append(
            Problem(
                check_ids.KEY_PREFIX,
                f'DELAYQ["KEY_PREFIX"] must be 1-64 characters of letters, '
                f"digits and _.:- (no braces: they mark Redis Cluster hash "
                f"tags); got {short_repr(prefix)}.",
                'Use e.g. "KEY_PREFIX": "delayq".',
            )
        )
    return problems


def _unknown_keys(raw: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for key in raw:
        if key in DEFAULTS:
            continue
        close = difflib.get_close_matches(str(key), DEFAULTS, n=1)
        hint = (
            f"Did you mean {close[0]!r}?"
            if close
            else f"Known keys: {', '.join(DEFAULTS)}."
        )
        problems.append(
            Problem(
                check_ids.UNKNOWN_SETTING,
                f"settings.DELAYQ has an unknown key {short_repr(key)}; it is ignored.",
                hint,
                error=False,
            )
        )
    return problems


def _connection_problems(raw: Mapping[Any, Any]) -> list[Problem]:
    url, alias = raw.get("REDIS_URL"), raw.get("CACHE_ALIAS")
    given = [key for key in _CONNECTION_KEYS if raw.get(key) is not None]
    if len(given) != 1:
        state = f"{' and '.join(given)} are set" if given else "none is set"
        return [
            Problem(
                check_ids.CONNECTION,
                f'DELAYQ needs exactly one of "REDIS_URL", "CACHE_ALIAS" and '
                f'"REDIS_SENTINEL"; {state}.',
                'Set "REDIS_URL": "redis://host:6379/0", "CACHE_ALIAS" naming a '
                'django-redis cache in CACHES, or "REDIS_SENTINEL" (a dict with '
                '"SERVICE" and "NODES").',
            )
        ]
    cluster = raw.get("REDIS_CLUSTER", False)
    if not isinstance(cluster, bool):
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_CLUSTER"] must be True or False; '
                f"got {short_repr(cluster)}.",
                '"REDIS_CLUSTER": True with "REDIS_URL" naming any node of the '
                "cluster.",
            )
        ]
    if cluster and given != ["REDIS_URL"]:
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_CLUSTER"] needs "REDIS_URL"; {given[0]} is set.',
                'Set "REDIS_URL" to any node of the cluster, e.g. '
                '"redis://10.0.0.1:7000/0"; the client finds the other nodes.',
            )
        ]
    if given == ["REDIS_SENTINEL"]:
        return _sentinel_problems(raw["REDIS_SENTINEL"])
    if url is not None:
        scheme = urlsplit(url).scheme if isinstance(url, str) else None
        if scheme not in _REDIS_SCHEMES:
            shown = repr(redact_url(url)) if isinstance(url, str) else short_repr(url)
            return [
                Problem(
                    check_ids.REDIS_URL,
                    f'DELAYQ["REDIS_URL"] must be a redis://, rediss:// or '
                    f"unix:// URL; got {shown}.",
                    'For example "redis://:password@127.0.0.1:6379/0", or '
                    '"rediss://..." for TLS.',
                )
            ]
        assert isinstance(url, str)
        malformed = _url_problem(url)
        if malformed is not None:
            return [
                Problem(
                    check_ids.REDIS_URL,
                    f'DELAYQ["REDIS_URL"] {redact_url(url)!r} is malformed: '
                    f"{malformed}.",
                    "Percent-encode the special characters of the user name and "
                    "password (urllib.parse.quote(password, safe='')): "
                    "'#' as %23, '/' as %2F, '?' as %3F, '@' as %40, ':' as %3A.",
                )
            ]
        if cluster:
            return _cluster_url_problems(url)
        return []
    caches = getattr(django_settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            Problem(
                check_ids.CACHE_ALIAS,
                f'DELAYQ["CACHE_ALIAS"] = {short_repr(alias)} is not a key of '
                f"settings.CACHES.",
                f"Use one of: {', '.join(map(repr, caches)) or '(none)'}.",
            )
        ]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis.") and backend != DJANGO_REDIS_CACHE:
        return [
            Problem(
                check_ids.CACHE_ALIAS,
                f"CACHES[{short_repr(alias)}] uses {backend!r}; CACHE_ALIAS must "
                f"name a Redis cache (Django's own, or django-redis).",
                f'Set its BACKEND to "{DJANGO_REDIS_CACHE}" or '
                '"django_redis.cache.RedisCache", or use "REDIS_URL" instead '
                'of "CACHE_ALIAS".',
            )
        ]
    return []


def redact_url(url: str) -> str:
    """``url`` with its credentials (everything between ``//`` and the last
    ``@``, so also a password whose ``@`` or ``/`` was not encoded) masked,
    for messages and logs."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://).*@", r"\1***@", url, flags=re.S)


def _url_problem(url: str) -> str | None:
    """What makes a redis://, rediss:// or unix:// URL unusable, or None.

    Such URLs mostly come from a password with a character that has a
    meaning in URLs and was not percent-encoded: the rest of the password
    then reads as a path, a query or a fragment, and the client would
    connect somewhere else, or print the password in its error.
    """
    parts = urlsplit(url)
    if parts.fragment or url.endswith("#"):
        return "it has a '#' part, which no Redis URL has"
    if parts.scheme == "unix":
        return None if parts.path else "it names no socket path"
    try:
        parts.port  # noqa: B018 - a non-numeric port raises here
    except ValueError:
        return "its port is not a number"
    if not parts.hostname:
        return "it names no host"
    if not re.fullmatch(r"/?\d*", parts.path):
        return "its path must be a database number, like /0"
    return None


def _cluster_url_problems(url: str) -> list[Problem]:
    parts = urlsplit(url)
    hint = (
        'Set "REDIS_URL" to any node of the cluster, e.g. '
        '"redis://10.0.0.1:7000/0" or "rediss://..." for TLS.'
    )
    if parts.scheme == "unix":
        return [
            Problem(
                check_ids.CLUSTER,
                'DELAYQ["REDIS_CLUSTER"] needs a redis:// or rediss:// '
                "REDIS_URL; a cluster is not reached through a unix socket.",
                hint,
            )
        ]
    if parts.path.strip("/") not in ("", "0"):
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_URL"] selects database {parts.path.strip("/")!r}; '
                f"a Redis Cluster has only database 0.",
                hint,
            )
        ]
    return []


def _sentinel_problems(value: Any) -> list[Problem]:
    def problem(msg: str, hint: str = f"For example {_SENTINEL_EXAMPLE}.") -> Problem:
        return Problem(check_ids.SENTINEL, msg, hint)

    if not isinstance(value, Mapping):
        return [
            problem(
                f'DELAYQ["REDIS_SENTINEL"] must be a dict, not {type(value).__name__}.'
            )
        ]
    problems = []
    unknown = sorted(str(key) for key in value if key not in _SENTINEL_KEYS)
    if unknown:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"] has unknown key(s) {unknown}.',
                f"Known keys: {', '.join(_SENTINEL_KEYS)}.",
            )
        )
    service = value.get("SERVICE")
    if not isinstance(service, str) or not service:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["SERVICE"] must be the name the '
                f"sentinels monitor the primary under; got {short_repr(service)}.",
                'For example "SERVICE": "mymaster" (the name in "sentinel '
                'monitor mymaster ..." of sentinel.conf).',
            )
        )
    nodes = value.get("NODES")
    if (
        not isinstance(nodes, list | tuple)
        or not nodes
        or any(_sentinel_node(node) is None for node in nodes)
    ):
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["NODES"] must be a non-empty list of '
                f'"host:port" strings (or (host, port) pairs); '
                f"got {short_repr(nodes)}.",
                'For example "NODES": ["10.0.0.1:26379", "10.0.0.2:26379", '
                '"10.0.0.3:26379"].',
            )
        )
    db = value.get("DB", 0)
    if not _is_int(db) or db < 0:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["DB"] must be a database number, 0 or '
                f"more; got {short_repr(db)}.",
                'Remove it to use database 0, or set e.g. "DB": 1.',
            )
        )
    for key in ("PASSWORD", "SENTINEL_PASSWORD"):
        secret = value.get(key)
        if secret is not None and not isinstance(secret, str):
            problems.append(
                problem(
                    f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be a string or None; '
                    f"got a {type(secret).__name__}.",
                    "Passwords are strings; remove the key if there is none.",
                )
            )
    ssl = value.get("SSL", False)
    if not isinstance(ssl, bool):
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["SSL"] must be True or False; '
                f"got {short_repr(ssl)}.",
                '"SSL": True connects to the sentinels and the primary over TLS.',
            )
        )
    return problems


def _sentinel_node(node: Any) -> tuple[str, int] | None:
    """``"host:port"`` or ``(host, port)`` as a pair, or None if malformed."""
    if isinstance(node, str):
        host, sep, port_text = node.rpartition(":")
        if not sep or not port_text.isdigit():
            return None
        host, port = host.strip("[]"), int(port_text)  # [::1]:26379
    elif isinstance(node, list | tuple) and len(node) == 2:
        host, port = node
    else:
        return None
    if not isinstance(host, str) or not host or not _is_int(port):
        return None
    return (host, port) if 0 < port < 65536 else None


def _queue_problems(queues: Any) -> list[Problem]:
    hint = 'For example "QUEUES": {"orders": {"shards": 4}}.'
    if not isinstance(queues, Mapping):
        return [
            Problem(
                check_ids.QUEUES,
                f'DELAYQ["QUEUES"] must be a dict of queue name to options, '
                f"not {type(queues).__name__}.",
                hint,
            )
        ]
    problems = []
    for name, options in queues.items():
        where = f'DELAYQ["QUEUES"][{short_repr(name)}]'
        if not isinstance(name, str) or not _QUEUE_NAME.match(name):
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f"{where}: a queue name must be 1-64 letters, digits or "
                    f"_.- characters.",
                    hint,
                )
            )
            continue
        if not isinstance(options, Mapping):
            problems.append(
                Problem(check_ids.QUEUES, f"{where} must be a dict of options.", hint)
            )
            continue
        unknown = set(options) - _QUEUE_KEYS
        if unknown:
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f"{where} has unknown option(s) {sorted(map(str, unknown))}.",
                    f"Known options: {', '.join(sorted(_QUEUE_KEYS))}.",
                )
            )
        shards = options.get("shards", 1)
        if not _is_int(shards) or not 1 <= shards <= _MAX_SHARDS:
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f'{where}["shards"] must be an integer from 1 to '
                    f"{_MAX_SHARDS}; got {short_repr(shards)}.",
                    hint,
                )
            )
    return problems


def _number_problems(raw: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for key, low, high, integer in (
        ("MAX_PAYLOAD_BYTES", 1, 64 * 1024 * 1024, True),
        ("MAX_RESULT_BYTES", 1, 64 * 1024 * 1024, True),
        ("MAX_ATTEMPTS", 1, 1000, True),  # registry.MAX_ATTEMPTS_LIMIT
        ("REDIS_TIMEOUT", 0.001, 60.0, False),
        ("RETRY_BACKOFF", 0.0, 86400.0, False),
        ("RETRY_BACKOFF_MAX", 0.0, 30 * 86400.0, False),
        ("VISIBILITY_TIMEOUT", 1.0, 86400.0, False),
        ("RECONCILE_HORIZON", 0.0, 30 * 86400.0, False),
        ("RETAIN_SUCCEEDED", 0.0, 3650 * 86400.0, False),
        ("RETAIN_FAILED", 0.0, 3650 * 86400.0, False),
        ("TIME_LIMIT", 0.001, MAX_TIME_LIMIT, False),
    ):
        value = raw.get(key, DEFAULTS[key])
        if key == "TIME_LIMIT" and value is None:
            continue  # no limit
        valid_type = _is_int(value) if integer else _is_number(value)
        if not valid_type or not low <= value <= high:
            kind = "an integer" if integer else "a number of seconds"
            problems.append(
                Problem(
                    check_ids.NUMBER,
                    f'DELAYQ["{key}"] must be {kind} from {low} to {high}; '
                    f"got {short_repr(value)}.",
                    f"Remove it to use the default ({DEFAULTS[key]!r}).",
                )
            )
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    # An int is finite however large (math.isfinite() would overflow on it).
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def parse(raw: Any) -> Settings:
    """Build :class:`Settings` from a ``DELAYQ`` value or raise on the first error."""
    errors = [p for p in find_problems(raw) if p.error]
    if errors:
        first = errors[0]
        raise InvalidConfiguration(f"{first.msg} {first.hint} ({first.id})")
    values = {**DEFAULTS, **raw}
    queues = {DEFAULT_QUEUE: QueueSettings(DEFAULT_QUEUE, 1)}
    for name, options in values["QUEUES"].items():
        queues[name] = QueueSettings(name, options.get("shards", 1))
    sentinel = None
    if values["REDIS_SENTINEL"] is not None:
        options = {**_SENTINEL_KEYS, **values["REDIS_SENTINEL"]}
        sentinel = SentinelSettings(
            service=options["SERVICE"],
            nodes=tuple(
                node
                for node in map(_sentinel_node, options["NODES"])
                if node is not None
            ),
            db=options["DB"],
            password=options["PASSWORD"],
            sentinel_password=options["SENTINEL_PASSWORD"],
            ssl=options["SSL"],
        )
    return Settings(
        redis_url=values["REDIS_URL"],
        cache_alias=values["CACHE_ALIAS"],
        sentinel=sentinel,
        cluster=values["REDIS_CLUSTER"],
        key_prefix=values["KEY_PREFIX"],
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
    )


_lock = threading.Lock()
_cached: Settings | None = None


def get_settings() -> Settings:
    """Return the parsed ``DELAYQ`` setting, parsing it on first use."""
    global _cached
    current = _cached
    if current is None:
        with _lock:
            if _cached is None:
                _cached = parse(raw_settings())
            current = _cached
    return current


def reset(**kwargs: Any) -> None:
    """Forget the parsed settings (a ``setting_changed`` receiver)."""
    global _cached
    if kwargs.get("setting", "DELAYQ") in ("DELAYQ", "CACHES"):
        with _lock:
            _cached = None
