"""``manage.py delayq_import_beat``: django-celery-beat's schedules as
runtime periodic schedules (edited in the admin from then on)."""

from __future__ import annotations

import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from django_delayq.contrib.celery.beat_import import BeatSchedule, read_beat_schedules
from django_delayq.exceptions import DelayQueueException
from django_delayq.models import PeriodicSchedule, RuntimeSchedule, write_db
from django_delayq.recurring.runtime import validate
from django_delayq.recurring.ticks import Schedule


class Command(BaseCommand):
    help = (
        "Import django-celery-beat's periodic tasks (crontab, interval and "
        "clocked schedules, enabled flags, arguments, queue, expiry) as "
        "runtime periodic schedules, printing what was mapped and what could "
        "not be. Stop celery beat first: each schedule then starts after the "
        "last tick beat sent, so no tick runs twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be imported; write nothing.",
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="Replace a runtime schedule of the same name (default: keep "
            "it and skip the beat entry).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not apps.is_installed("django_celery_beat"):
            raise CommandError(
                "django_celery_beat is not in INSTALLED_APPS: this command reads "
                "its tables. Add it (with the package installed) while you "
                "import, then remove it."
            )
        dry_run, replace = options["dry_run"], options["replace"]
        imported, skipped = 0, 0
        plans: list[tuple[BeatSchedule, RuntimeSchedule | None]] = []
        existing = set(RuntimeSchedule.objects.values_list("name", flat=True))
        for beat in read_beat_schedules():
            row, problem = _runtime_row(beat)
            if problem is None and beat.name in existing and not replace:
                problem = "a runtime schedule has this name (pass --replace)"
            if problem is not None:
                self.stdout.write(f"skipped {beat.name!r}: {problem}")
                skipped += 1
                continue
            plans.append((beat, row))
        with transaction.atomic(using=write_db()):
            for beat, row in plans:
                described = _describe(beat)
                self.stdout.write(
                    f"{'would import' if dry_run else 'imported'} "
                    f"{beat.name!r}: {described}"
                )
                for note in beat.dropped:
                    self.stdout.write(f"    not kept: {note}")
                imported += 1
                if dry_run:
                    continue
                if row is None:
                    _schedule_once(beat)
                else:
                    _save(beat, row, replace)
        verb = "would import" if dry_run else "imported"
        self.stdout.write(f"{verb} {imported}, skipped {skipped}")


def _runtime_row(beat: BeatSchedule) -> tuple[RuntimeSchedule | None, str | None]:
    """The runtime schedule of a beat entry (None for a clocked one, which
    is scheduled once instead), or why it cannot be imported."""
    if not beat.importable:
        return None, beat.refused
    if beat.once_at is not None:
        if beat.runs or not beat.enabled:
            return None, "a clocked schedule that already ran, or is disabled"
        return None, None
    every = None
    if beat.every is not None:
        seconds = beat.every.total_seconds()
        if not seconds.is_integer():
            return None, f"every {seconds:g} s is not a whole number of seconds"
        every = int(seconds)
    row = RuntimeSchedule(
        name=beat.name,
        task=beat.task,
        args=beat.args,
        kwargs=beat.kwargs,
        cron=beat.cron or "",
        every=every,
        time_zone=beat.timezone or "",
        queue=beat.queue or "",
        priority=beat.priority,
        catch_up="none" if beat.skip_missed else "latest",
        enabled=beat.enabled,
        expires_at=beat.expires_at,
    )
    try:
        validate(row)
    except ValidationError as exc:
        messages = "; ".join(
            message for field in exc.message_dict.values() for message in field
        )
        return None, messages
    return row, None


def _save(beat: BeatSchedule, row: RuntimeSchedule, replace: bool) -> None:
    db = write_db()
    if replace:
        RuntimeSchedule.objects.using(db).filter(name=row.name).delete()
    row.save(using=db)
    if beat.last_run_at is None or not beat.enabled:
        return  # starts with its next tick, as any new schedule
    schedule: Schedule = validate(row)
    # Planned through beat's last tick: the planner writes the ticks after
    # it, and those missed since beat stopped run by the catch-up policy.
    PeriodicSchedule.objects.using(db).update_or_create(
        name=row.name,
        defaults={
            "definition": schedule.definition,
            "planned_through": min(beat.last_run_at, timezone.now()),
        },
    )


def _schedule_once(beat: BeatSchedule) -> None:
    from django_delayq import schedule
    from django_delayq.exceptions import DuplicateTask

    assert beat.once_at is not None
    try:
        schedule(
            beat.task,
            args=beat.args,
            kwargs=beat.kwargs,
            eta=max(beat.once_at, timezone.now()),
            queue=beat.queue,
            key=f"beat-clocked:{beat.name}"[:200],
        )
    except DuplicateTask:
        pass  # imported before
    except DelayQueueException as exc:
        raise CommandError(f"{beat.name!r}: {exc}") from None


def _describe(beat: BeatSchedule) -> str:
    if beat.once_at is not None:
        return f"once at {beat.once_at.isoformat()} ({beat.task})"
    when = (
        f"cron {beat.cron}" + (f" {beat.timezone}" if beat.timezone else "")
        if beat.cron
        else f"every {_seconds(beat.every)}"
    )
    state = "" if beat.enabled else ", disabled"
    return f"{when}, {beat.task}{state}"


def _seconds(every: datetime.timedelta | None) -> str:
    return "?" if every is None else f"{every.total_seconds():g} s"
