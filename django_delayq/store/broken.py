"""Keys of ours holding a type no django-delayq process writes there.

Only a person (``SET`` by hand) or a bug puts a string where a due-set or a
stream belongs. Redis then answers every command on that key with
``WRONGTYPE``; left alone, one such key would fail every multi-stream read of
a worker, and with it every queue the worker serves. The store leaves the
key out of what it can do without it, logs it (at most once a minute per
key), and the sweeper replaces it (see ``Sweeper._repair_keys``): the rows
it indexed are indexed again, as after any loss of Redis data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

import redis

from .errors import translated

logger = logging.getLogger("django_delayq.store")

_REPORT_EVERY = 60.0
_reported: dict[str, float] = {}
_lock = threading.Lock()


def is_wrong_type(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("WRONGTYPE")


def report_wrong_type(key: str, expected: str, found: str | None = None) -> None:
    """Log that ``key`` is not ``expected``, once a minute per key."""
    now = time.monotonic()
    with _lock:
        if now - _reported.get(key, -_REPORT_EVERY) < _REPORT_EVERY:
            return
        _reported[key] = now
    logger.error(
        "Redis key %s should be %s but holds %s (written by hand?); left out "
        "until the sweeper replaces it",
        key,
        expected,
        found or "another type",
    )


def wrong_types(client: redis.Redis, expected: Mapping[str, str]) -> dict[str, str]:
    """The keys holding another type than ``expected[key]`` (``"zset"``,
    ``"stream"``, ``"list"``, ``"string"``), with the type each holds; a
    missing key is fine. One round trip; on a cluster all keys must share
    one hash slot."""
    pipe = client.pipeline(transaction=False)
    for key in expected:
        pipe.type(key)
    wrong = {}
    for key, found in zip(expected, pipe.execute(), strict=True):
        found = found.decode() if isinstance(found, bytes) else str(found)
        if found not in (expected[key], "none"):
            wrong[key] = found
    return wrong


def keys_of_type(client: redis.Redis, keys: Sequence[str], kind: str) -> list[str]:
    """The ``keys`` that hold ``kind`` or are missing; log the others."""
    wrong = wrong_types(client, dict.fromkeys(keys, kind))
    for key, found in wrong.items():
        report_wrong_type(key, f"a {kind}", f"a {found}")
    return [key for key in keys if key not in wrong]


@translated
def replace_wrong_types(client: redis.Redis, expected: Mapping[str, str]) -> int:
    """Delete each key that holds another type than ``expected[key]``; how
    many were deleted.

    What such a key stood for is lost already (nothing could be added to
    it), so deleting it loses nothing more: the sweeper then indexes the
    rows again, as after Redis lost data. One round trip when nothing is
    wrong.
    """
    wrong = wrong_types(client, expected)
    for key, found in wrong.items():
        client.delete(key)
        with _lock:
            _reported.pop(key, None)  # should it break again, say so at once
        logger.error(
            "Redis key %s should be a %s but held a %s (written by hand?); "
            "deleted, and the tasks it stood for are indexed again",
            key,
            expected[key],
            found,
        )
    return len(wrong)
