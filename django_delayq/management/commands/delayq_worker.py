from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_delayq.management.lifecycle import (
    add_queue_option,
    add_worker_options,
    command_context,
    option_errors,
    worker_options,
)
from django_delayq.worker import Worker


class Command(BaseCommand):
    help = "Run the tasks the dispatchers make ready. Run one or more."

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_option(parser)
        add_worker_options(parser)
        parser.add_argument(
            "--visibility-timeout",
            type=float,
            default=None,
            help='Overrides DELAYQ["VISIBILITY_TIMEOUT"] (seconds).',
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="Run what is ready now, then exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with option_errors():
            worker = Worker(
                options["queues"],
                **worker_options(options),
                visibility_timeout=options["visibility_timeout"],
            )
        with command_context(worker.stop, "delayq_worker", options["verbosity"]):
            stats = worker.run(once=options["once"])
        if options["verbosity"]:
            self.stdout.write(
                f"delayq_worker: {stats.processed} processed, "
                f"{stats.dead_lettered} dead-lettered, {stats.reclaimed} reclaimed"
            )
