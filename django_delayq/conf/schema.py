"""What ``DELAYQ`` holds: its keys and defaults, the limits of its values,
and the :class:`Problem` its validators report.

A leaf module (it imports nothing of the package), so that the settings
parser, its validators and the code that needs a limit can all use it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

DEFAULT_QUEUE = "default"

#: Every key ``DELAYQ`` understands, with its default.
DEFAULTS: dict[str, Any] = {
    "REDIS_URL": None,
    "CACHE_ALIAS": None,
    "REDIS_SENTINEL": None,
    "REDIS_CLUSTER": False,
    "KEY_PREFIX": "delayq",
    "TEST_KEY_PREFIX": None,
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
    "CANCEL_GRACE": 10.0,
    "PERIODIC": {},
    "TEST_MODE": None,
    "MIDDLEWARE": [],
}

#: The named values of ``TEST_MODE`` and the indexer class each stands for
#: (None: production behaviour, Redis indexes). Any other value is the
#: dotted path of an indexer class, as ``EMAIL_BACKEND`` names a backend:
#: the package reaches the testing toolkit only through these strings.
TEST_MODES = {
    "manual": "django_delayq.testing.modes.ManualIndexer",
    "immediate": "django_delayq.testing.modes.ImmediateIndexer",
}
#: A dotted path: ``package.module.Class``.
DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def is_test_mode(value: object) -> bool:
    """Whether ``value`` names a test mode: an alias or a dotted path."""
    return isinstance(value, str) and (
        value in TEST_MODES or DOTTED_PATH.match(value) is not None
    )


def indexer_path(test_mode: str) -> str:
    """The dotted path of the indexer class a ``TEST_MODE`` names."""
    return TEST_MODES.get(test_mode, test_mode)


#: The longest time limit a task may have (a week).
MAX_TIME_LIMIT = 7 * 86400.0

QUEUE_KEYS = {"shards", "concurrency_limit", "rate_limit"}
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: No ":": every key is ``<prefix>:...``, so a prefix holding one would nest
#: in another ("shop" and "shop:eu"), and neither a key pattern of an ACL
#: user (``~shop:*``) nor a ``SCAN`` could tell the two projects' keys apart.
KEY_PREFIX_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
REDIS_SCHEMES = ("redis", "rediss", "unix")
CONNECTION_KEYS = ("REDIS_URL", "CACHE_ALIAS", "REDIS_SENTINEL")
#: Django's built-in Redis cache backend, which CACHE_ALIAS may name.
DJANGO_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
#: REDIS_SENTINEL's keys, with their defaults (None: required)
SENTINEL_KEYS: dict[str, Any] = {
    "SERVICE": None,
    "NODES": None,
    "DB": 0,
    "USERNAME": None,
    "PASSWORD": None,
    "SENTINEL_USERNAME": None,
    "SENTINEL_PASSWORD": None,
    "SSL": False,
    "SSL_CA_CERTS": None,
    "SSL_CERTFILE": None,
    "SSL_KEYFILE": None,
    "SSL_CERT_REQS": "required",
}
#: REDIS_SENTINEL's TLS options beside "SSL": redis-py's ``ssl_*`` arguments
#: (as a ``rediss://`` URL's query takes them), upper-cased
SENTINEL_TLS_FILES = ("SSL_CA_CERTS", "SSL_CERTFILE", "SSL_KEYFILE")
#: The values of REDIS_SENTINEL's "SSL_CERT_REQS", as redis-py names them
SENTINEL_CERT_REQS = ("required", "optional", "none")
SENTINEL_EXAMPLE = (
    '"REDIS_SENTINEL": {"SERVICE": "mymaster", "NODES": ["10.0.0.1:26379", '
    '"10.0.0.2:26379", "10.0.0.3:26379"]}'
)
MAX_SHARDS = 1024


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings, as a system check reports it."""

    id: str
    msg: str
    hint: str
    error: bool = True


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    # An int is finite however large (math.isfinite() would overflow on it).
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
