"""``pause_queue()``, ``resume_queue()``, ``paused_queues()``, and the
mirror of the rows in Redis (see the package docstring)."""

from __future__ import annotations

import logging

from django.db import transaction

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..models import PausedQueue, write_db
from ..store import pauses
from ..store.connection import Client, get_client
from ..timing import to_score

logger = logging.getLogger(__name__)


def pause_queue(name: str, *, by: str = "", reason: str = "") -> bool:
    """Pause queue ``name``: from within a second of the commit, no worker
    starts its tasks (those running finish); they wait, due, until
    :func:`resume_queue`.

    Transactional like :func:`~django_delayq.schedule`: inside the caller's
    transaction the pause takes effect when it commits. ``by`` and
    ``reason`` are kept on the row, for the status report and the admin.

    :return: ``False`` if the queue was paused already (nothing changes).
    :raises UnknownQueue: ``name`` is not a configured queue.
    """
    settings = get_settings()
    settings.queue(name)  # UnknownQueue, naming the configured ones
    db = write_db()
    with transaction.atomic(using=db):
        row, created = PausedQueue.objects.using(db).get_or_create(
            name=name, defaults={"paused_by": by[:150], "reason": reason[:200]}
        )
        at = to_score(row.paused_at)
        # Written even when the row was there: an idempotent repair of a
        # mirror whose earlier write failed.
        transaction.on_commit(lambda: _write("pause", name, at), using=db)
    if created:
        logger.info("queue %s paused%s", name, f" by {by}" if by else "")
    return created


def resume_queue(name: str) -> bool:
    """Resume queue ``name``: its tasks due meanwhile start, in the order
    they fell due. Transactional like :func:`pause_queue`.

    :return: ``False`` if the queue was not paused (nothing changes).
    :raises UnknownQueue: ``name`` is neither configured nor paused.
    """
    db = write_db()
    with transaction.atomic(using=db):
        deleted, _ = PausedQueue.objects.using(db).filter(name=name).delete()
        if not deleted:
            get_settings().queue(name)  # a queue no longer configured may resume
        transaction.on_commit(lambda: _write("resume", name, 0), using=db)
    if deleted:
        logger.info("queue %s resumed", name)
    return bool(deleted)


def paused_queues(*, using: str | None = None) -> list[PausedQueue]:
    """The paused queues' rows, by name."""
    return list(PausedQueue.objects.using(using or write_db()).order_by("name"))


def _write(op: str, name: str, at: int) -> None:
    prefix = get_settings().key_prefix
    try:
        client = get_client("schedule")
        if op == "pause":
            pauses.pause(client, prefix, name, at)
        else:
            pauses.resume(client, prefix, name)
    except RedisUnavailable as exc:
        # The row is committed: the sweeper's next pass mirrors it. Until
        # then the workers go on as before (a pause is not seen yet).
        logger.warning(
            "queue %s: %s committed, but Redis did not take it (%s); the "
            "sweeper's next pass mirrors it",
            name,
            "pause" if op == "pause" else "resume",
            exc,
        )


def rows_now(using: str | None = None) -> dict[str, int]:
    """The paused queues as the rows say now: name -> paused_at (epoch ms)."""
    rows = PausedQueue.objects.using(using or write_db()).values_list(
        "name", "paused_at"
    )
    return {name: to_score(at) for name, at in rows}


def mirror(client: Client | None = None) -> tuple[dict[str, int], bool]:
    """The paused queues, the mirror made to say what the rows say.

    Reads the mirror, then the rows (the order matters: a pause or resume
    that commits after the rows were read writes the mirror after, which
    bumps its version and makes the replacement step aside, see
    ``lua/paused.lua``). Returns the rows' answer and whether the mirror
    was rewritten. Raises :class:`RedisUnavailable` or the database's error.
    """
    client = client or get_client("loop")
    prefix = get_settings().key_prefix
    seen = pauses.read(client, prefix)
    rows = rows_now()
    if seen.paused == rows:
        return rows, False
    replaced = pauses.replace(client, prefix, seen.version, rows)
    if replaced:
        logger.info(
            "the paused queues' mirror was rewritten from the rows: %s",
            ", ".join(sorted(rows)) or "none paused",
        )
    return rows, replaced
