"""One project per ``KEY_PREFIX`` on a Redis.

Two projects whose settings name the same Redis and the same ``KEY_PREFIX``
would each take the other's index for their own: each sweeper deletes the
other's due entries as ghosts (no row has their id), each worker
dead-letters the other's tasks. Nothing in Redis alone can tell them apart,
so the prefix is claimed: ``<prefix>:owner`` holds the fingerprint of the
database whose rows it indexes, written by the first loop (dispatcher,
worker, sweeper) or ``manage.py check --database`` / ``migrate`` to find
it missing, and every other one refuses to run (``delayq.E014``). A loop
that cannot reach the key (its Redis Cluster node is failing over) goes on
and checks again soon: see :func:`check_prefix_if_reachable`.

The fingerprint is a hash of when django-delayq's first migration was
applied to that database, as ``django_migrations`` records it: the same for
every process of one project, different for two projects, and kept when
``flush`` empties the tables. (A database copied from another, as a staging
copy of production, shares its fingerprint: give such copies their own
``KEY_PREFIX``.) Redis losing its data loses the key too; the next loop
claims it again.

``schedule()`` checks too, before its first write to the due-sets (and
again a minute after each check that passed, in case Redis lost the claim
meanwhile): another project's loops would otherwise find this project's ids
in their due-sets. See :func:`check_prefix_for_writes`.
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.db import DatabaseError, connections
from django.db.migrations.recorder import MigrationRecorder

from .conf import Settings, check_ids, get_settings
from .exceptions import KeyPrefixInUse, RedisUnavailable
from .models import write_db
from .store.connection import Client, get_client
from .store.ownership import claim_prefix, owner_key

logger = logging.getLogger(__name__)

#: How often a running dispatcher checks the claim again, in seconds (the
#: sweeper does at every pass, a worker before it dead-letters an unknown id).
OWNER_CHECK_INTERVAL = 60.0
#: How soon after a check that could not reach Redis it is tried again.
OWNER_RETRY_INTERVAL = 5.0

_fingerprints: dict[str, str | None] = {}
#: The write path's last check that passed: the settings and database it was
#: made for, and until when (monotonic) it holds.
_writable: tuple[Settings, str, float] | None = None


def fingerprint(using: str | None = None) -> str | None:
    """This project's fingerprint, from the database of task rows; None if
    that database has no record of django-delayq's first migration."""
    alias = using or write_db()
    if alias not in _fingerprints:
        try:
            recorded = (
                MigrationRecorder(connections[alias])
                .migration_qs.filter(app="django_delayq", name="0001_initial")
                .values_list("applied", flat=True)
                .first()
            )
        except DatabaseError:  # no django_migrations table yet
            return None
        if recorded is None:
            return None  # not migrated yet: ask again next time
        vendor = connections[alias].vendor
        digest = hashlib.sha256(f"{vendor}:{recorded.isoformat()}".encode())
        _fingerprints[alias] = digest.hexdigest()[:16]
    return _fingerprints[alias]


def check_prefix() -> None:
    """Claim ``KEY_PREFIX`` on the configured Redis for this project, or
    raise :class:`KeyPrefixInUse` if another project holds it.

    Raises ``RedisUnavailable`` if Redis does not answer; does nothing if
    the database is not migrated yet (there is nothing to protect).
    """
    ours = fingerprint()
    if ours is None:
        return
    prefix = get_settings().key_prefix
    owner = claim_prefix(get_client("loop"), prefix, ours)
    if owner != ours:
        error = _in_use(prefix, owner, ours)
        logger.error("%s", error)
        raise error


def check_prefix_for_writes(client: Client, using: str) -> None:
    """Claim ``KEY_PREFIX`` like :func:`check_prefix`, for a write of the
    rows of database ``using`` to the due-sets through ``client``; raise
    :class:`KeyPrefixInUse`, unlogged, if another project holds it.

    ``schedule()`` is a hot path: a check that passed holds for
    :data:`OWNER_CHECK_INTERVAL` in this process (for these settings and
    this database), so it costs one round trip a minute, not one per write.
    One that failed is not remembered: the next write asks again, and goes
    through as soon as the prefix is this project's.
    """
    global _writable
    settings = get_settings()
    now = time.monotonic()
    known = _writable
    if (
        known is not None
        and known[0] is settings
        and known[1] == using
        and now < known[2]
    ):
        return
    ours = fingerprint(using)
    if ours is None:
        return  # not migrated: there are no rows to write
    owner = claim_prefix(client, settings.key_prefix, ours)
    if owner != ours:
        _writable = None
        raise _in_use(settings.key_prefix, owner, ours)
    _writable = (settings, using, now + OWNER_CHECK_INTERVAL)


def forget_checks() -> None:
    """Forget the write path's last check that passed, so the next write
    checks again (for code, tests included, that changed the claim itself)."""
    global _writable
    _writable = None


def _in_use(prefix: str, owner: str, ours: str) -> KeyPrefixInUse:
    return KeyPrefixInUse(
        f'DELAYQ["KEY_PREFIX"] {prefix!r} on this Redis belongs to another '
        f"project (fingerprint {owner}; this one's is {ours}): sharing it, "
        f"each project's sweeper would delete the other's tasks and its "
        f"workers would dead-letter them. Give each project its own "
        f"KEY_PREFIX or Redis database; if the other project is gone for "
        f"good, delete the key {owner_key(prefix)!r}. "
        f"({check_ids.KEY_PREFIX_IN_USE})"
    )


def check_prefix_if_reachable() -> bool:
    """:func:`check_prefix`, for the loops: True if it could be checked.

    On a Redis Cluster the owner key lives on one node; while that node
    fails over, the shards of the other nodes must go on, so a loop that
    cannot reach the key checks again later instead of stopping (on one
    Redis its next command fails anyway). Another project's claim still
    raises :class:`KeyPrefixInUse`.
    """
    try:
        check_prefix()
    except RedisUnavailable as exc:
        logger.debug("KEY_PREFIX owner not checked: %s", exc)
        return False
    return True
