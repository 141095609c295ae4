"""A test run's key namespace, removed when its process exits.

During a test run the key prefix is one of the run's own (see
:mod:`django_delayq.conf`), so that tests never share keys with the
development processes on the same Redis, nor with another test run. Django
drops its test database at the end of a run; this drops the namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from multiprocessing import util

import redis

from ..conf import Settings

#: A client as :mod:`.connection` builds them (kept apart from it: that
#: module registers the removal).
Client = redis.Redis

logger = logging.getLogger(__name__)

#: Keys removed per command.
BATCH = 500

_registered: set[tuple[object, ...]] = set()


def remove_keys(client: Client, prefix: str) -> int:
    """Delete every key under ``prefix`` (on every node of a Redis Cluster);
    return how many there were."""
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=BATCH):
        batch.append(key)
        if len(batch) >= BATCH:
            removed += client.unlink(*batch)
            batch.clear()
    if batch:
        removed += client.unlink(*batch)
    return removed


def remove_at_exit(settings: Settings, connect: Callable[[], Client]) -> None:
    """Remove the keys of ``settings.key_prefix`` when this process exits.

    A multiprocessing finalizer, not ``atexit``: a worker process of
    ``test --parallel`` ends through multiprocessing, which runs its
    finalizers but not ``atexit``, and a finalizer registered before a fork
    does not run in the child.
    """
    where = (
        settings.key_prefix,
        settings.redis_url,
        settings.cache_alias,
        settings.sentinel,
        settings.cluster,
    )
    if where in _registered:
        return
    _registered.add(where)
    util.Finalize(None, _remove, args=(settings.key_prefix, connect), exitpriority=0)


def _remove(prefix: str, connect: Callable[[], Client]) -> None:
    try:
        client = connect()
        try:
            removed = remove_keys(client, prefix)
        finally:
            client.close()
    except redis.ConnectionError as exc:  # Redis stopped before the tests did
        logger.debug("Keys of the test run's %r not removed: %s", prefix, exc)
        return
    except Exception as exc:  # the ACL has no SCAN or UNLINK, say
        logger.warning("Keys of the test run's %r not removed: %s", prefix, exc)
        return
    logger.debug("Removed the test run's %d keys under %r", removed, prefix)
