from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import WorkerStuck
from django_delayq.management.lifecycle import (
    add_queue_option,
    add_worker_options,
    command_context,
    option_errors,
    worker_options,
)
from django_delayq.management.metrics import (
    add_metrics_options,
    check_metrics_options,
    metrics_served,
)
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker


class Command(BaseCommand):
    help = (
        "For development: a dispatcher, a worker and a sweeper in one process. "
        "In production run delayq_dispatch, delayq_worker and delayq_sweep."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_option(parser)
        add_worker_options(parser)
        add_metrics_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with option_errors():
            check_metrics_options(options)
            dispatcher = Dispatcher(options["queues"])
            worker = Worker(
                options["queues"],
                **worker_options(options),
            )
            sweeper = Sweeper()

        def stop() -> None:
            dispatcher.stop()
            worker.stop()
            sweeper.stop()

        with (
            command_context(stop, "delayq_run", options["verbosity"]),
            metrics_served(options),
        ):
            threads = [
                threading.Thread(target=dispatcher.run, name="delayq-dispatcher"),
                threading.Thread(target=sweeper.run, name="delayq-sweeper"),
            ]
            for thread in threads:
                thread.start()
            try:
                worker.run()
            except WorkerStuck as exc:
                raise CommandError(str(exc)) from None
            finally:
                stop()
                for thread in threads:
                    thread.join()
