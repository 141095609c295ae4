from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import RedisUnavailable
from django_delayq.management.lifecycle import (
    add_queue_option,
    command_context,
    option_errors,
)
from django_delayq.management.metrics import (
    add_metrics_options,
    check_metrics_options,
    metrics_served,
)
from django_delayq.store.errors import error_text


class Command(BaseCommand):
    help = (
        "Move due tasks from the due-sets to the ready streams. Run one or "
        "more; they share the shards through leases."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_option(parser)
        add_metrics_options(parser)
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            help="The most ids moved by one Redis script call (default 1000).",
        )
        parser.add_argument(
            "--lease-ttl",
            type=float,
            default=30.0,
            help="Seconds before a dead dispatcher's shards are taken over "
            "(default 30).",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="Move what is due now, then exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with option_errors():
            check_metrics_options(options)
            dispatcher = Dispatcher(
                options["queues"],
                batch_size=options["batch_size"],
                lease_ttl=options["lease_ttl"],
            )
        with (
            command_context(dispatcher.stop, "delayq_dispatch", options["verbosity"]),
            metrics_served(options),
        ):
            try:
                stats = dispatcher.run(once=options["once"])
            except RedisUnavailable as exc:
                # Only --once gets here; a looping dispatcher logs and retries.
                raise CommandError(f"dispatch failed: {error_text(exc)}") from exc
        if options["verbosity"]:
            self.stdout.write(f"delayq_dispatch: moved {stats.moved} task(s)")
