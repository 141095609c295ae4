from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_delayq.exceptions import RedisUnavailable
from django_delayq.management.lifecycle import command_context, option_errors
from django_delayq.management.metrics import (
    add_metrics_options,
    check_metrics_options,
    metrics_served,
)
from django_delayq.store.errors import error_text
from django_delayq.sweeper import Sweeper


class Command(BaseCommand):
    help = (
        "Keep Redis consistent with the task rows: replay the outbox, re-index "
        "tasks Redis lost, drop stale entries, recover stuck work, prune old rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=30.0,
            help="Seconds between passes (default 30): the most a task can be "
            "late after Redis lost it.",
        )
        parser.add_argument(
            "--once", action="store_true", help="Run one pass, print it, exit."
        )
        add_metrics_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with option_errors():
            if not 0 < options["interval"] <= 86400:  # also refuses nan and inf
                raise ValueError(
                    f"--interval must be more than 0 and at most 86400 seconds; "
                    f"got {options['interval']}."
                )
            check_metrics_options(options)
            sweeper = Sweeper(progress=lambda line: self.stderr.write(f"sweep: {line}"))
        with (
            command_context(sweeper.stop, "delayq_sweep", options["verbosity"]),
            metrics_served(options),
        ):
            try:
                result = sweeper.run(interval=options["interval"], once=options["once"])
            except (RedisUnavailable, DatabaseError) as exc:
                # Only --once gets here; a looping sweeper logs and retries.
                raise CommandError(f"sweep failed: {error_text(exc)}") from exc
        if options["once"] and options["verbosity"]:
            self.stdout.write(f"delayq_sweep: {result}")
