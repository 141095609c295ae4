"""``manage.py delayq_tasks``: list, show, cancel, retry or run now the tasks
that filters name, in batches (see :mod:`django_delayq.management.bulk`)."""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError

from django_delayq.management import bulk
from django_delayq.models import DelayedTask, read_db, write_db

#: Exit codes besides 0 (done) and 1 (an error: CommandError's default).
REFUSED = 2  # a change was not confirmed
NOT_ALL_CHANGED = 3  # some tasks could not be changed

ACTIONS = ("list", "show", *bulk.CHANGES)


class Command(BaseCommand):
    help = (
        "List or show tasks, or cancel, retry or run now every task the "
        "filters name: a count and a sample first, then, confirmed, one task "
        "at a time through the public API. Exits 0 done, 1 on an error, 2 "
        "when a change was not confirmed, 3 when some tasks could not be "
        "changed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument(
            "task_id", nargs="?", metavar="ID", help="The task to show (show only)."
        )
        parser.add_argument(
            "--name",
            action="append",
            dest="names",
            metavar="NAME",
            help="The task's registered name, exactly (repeatable).",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="The task's queue (repeatable).",
        )
        parser.add_argument(
            "--status",
            action="append",
            dest="statuses",
            metavar="STATUS",
            help="scheduled, running, succeeded, failed or cancelled (repeatable).",
        )
        parser.add_argument(
            "--key",
            metavar="PREFIX",
            help="Dedupe keys starting with PREFIX (case-sensitive).",
        )
        for option, column, bound in (
            ("--after", "run_at", "at or after"),
            ("--before", "run_at", "before"),
            ("--finished-after", "finished_at", "at or after"),
            ("--finished-before", "finished_at", "before"),
        ):
            parser.add_argument(
                option,
                metavar="WHEN",
                help=f"{column} {bound} WHEN (ISO 8601; without an offset, in "
                "TIME_ZONE).",
            )
        parser.add_argument(
            "--limit", type=int, metavar="N", help="list: at most N tasks."
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="list: one JSON object per line; show: one JSON object.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be changed; change nothing.",
        )
        parser.add_argument(
            "--yes",
            action="store_true",
            help="Change without asking for confirmation.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=bulk.BATCH_SIZE,
            metavar="N",
            help=f"Tasks read per query (default {bulk.BATCH_SIZE}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        _check_options(action, options)
        if action == "show":
            self._show(options["task_id"], options["json"])
            return
        filters = bulk.parse_filters(options)
        if action == "list":
            self._list(filters, options)
        else:
            self._change(bulk.CHANGES[action], filters, options)

    def _show(self, task_id: str, as_json: bool) -> None:
        try:
            pk = uuid.UUID(task_id)
        except ValueError:
            raise CommandError(f"{task_id!r} is not a task id (a UUID).") from None
        task = DelayedTask.objects.using(read_db()).filter(pk=pk).first()
        if task is None:
            raise CommandError(f"No task has the id {pk}.")
        if as_json:
            self.stdout.write(
                json.dumps(bulk.all_fields(task), cls=DjangoJSONEncoder, indent=2)
            )
        else:
            self.stdout.write(bulk.show_text(task))

    def _list(self, filters: bulk.Filters, options: dict[str, Any]) -> None:
        rows = filters.queryset(read_db())
        as_json = options["json"]
        if not as_json:
            self.stdout.write(bulk.table_line(bulk.TABLE_HEADER))
        for batch in bulk.batches(rows, options["batch_size"], options["limit"]):
            for task in batch:
                line = bulk.json_line(task) if as_json else bulk.table_row(task)
                self.stdout.write(line)

    def _change(
        self, change: bulk.Change, filters: bulk.Filters, options: dict[str, Any]
    ) -> None:
        filters = bulk.targets(change, filters)
        rows = filters.queryset(write_db())
        count = rows.count()
        if not count:
            self.stdout.write(f"{change.name}: no task matches; nothing to do.")
            return
        self.stdout.write(
            f"{change.name}: {count} task(s) match "
            f"({', '.join(filters.statuses)}); "
            f"the first {min(count, bulk.SAMPLE_SIZE)}:"
        )
        self.stdout.write(bulk.table_line(bulk.TABLE_HEADER))
        for task in rows.order_by("pk")[: bulk.SAMPLE_SIZE]:
            self.stdout.write(bulk.table_row(task))
        if options["dry_run"]:
            self.stdout.write(
                f"{change.name}: dry run, would change up to {count} task(s); "
                f"nothing changed."
            )
            return
        if not options["yes"]:
            self._confirm(change, count)
        self.stdout.flush()

        def report(task_id: uuid.UUID, outcome: bulk.Outcome, reason: str) -> None:
            self.stderr.write(
                f"{change.name}: task {task_id} {outcome.value}: {reason}"
            )

        def progress(tally: bulk.Tally) -> None:
            self.stderr.write(
                f"{change.name}: {tally.seen} of {count} (done {tally.done}, "
                f"skipped {tally.skipped}, failed {tally.failed})"
            )

        try:
            tally = bulk.apply_change(
                change, rows, options["batch_size"], report, progress
            )
        except DatabaseError as exc:
            raise CommandError(
                f"{change.name} stopped on a database error: {exc}. The tasks "
                f"changed so far stay changed; run the command again to go on."
            ) from exc
        summary = (
            f"{change.name}: {change.done} {tally.done}, skipped {tally.skipped} "
            f"(changed meanwhile), failed {tally.failed}"
        )
        if tally.failed:
            raise CommandError(summary, returncode=NOT_ALL_CHANGED)
        self.stdout.write(summary)

    def _confirm(self, change: bulk.Change, count: int) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                f"{change.name}: refused to change {count} task(s) without "
                f"confirmation: standard input is not a terminal to ask on. "
                f"Pass --yes to go ahead, or --dry-run to see what would change.",
                returncode=REFUSED,
            )
        answer = input(f'Type "yes" to {change.name} these {count} task(s): ')
        if answer.strip().lower() != "yes":
            raise CommandError(
                f"{change.name}: not confirmed; nothing changed.", returncode=REFUSED
            )


def _check_options(action: str, options: dict[str, Any]) -> None:
    """Refuse the options that mean nothing for ``action``."""
    filters = (
        "names",
        "queues",
        "statuses",
        "key",
        "after",
        "before",
        "finished_after",
        "finished_before",
    )
    if action == "show":
        if not options["task_id"]:
            raise CommandError("show needs a task id: delayq_tasks show ID.")
        given = [name for name in filters if options.get(name)]
        if given:
            raise CommandError(
                f"show takes a task id, not filters (--{given[0].replace('_', '-')})."
            )
    elif options["task_id"]:
        raise CommandError(
            f"{action} takes filters, not a task id; use --key, --name, ... "
            f"(show ID shows one task)."
        )
    if action != "list" and options["limit"] is not None:
        raise CommandError("--limit is for list only.")
    if options["limit"] is not None and options["limit"] < 1:
        raise CommandError(f"--limit must be 1 or more; got {options['limit']}.")
    if action in {"list", "show"} and (options["dry_run"] or options["yes"]):
        raise CommandError(
            f"--dry-run and --yes are for cancel, retry and run-now; {action} "
            f"changes nothing."
        )
    if action not in {"list", "show"} and options["json"]:
        raise CommandError("--json is for list and show.")
    if not 1 <= options["batch_size"] <= 10000:
        raise CommandError(
            f"--batch-size must be from 1 to 10000; got {options['batch_size']}."
        )
