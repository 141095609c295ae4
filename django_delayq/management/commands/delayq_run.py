from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_delayq.dispatcher import Dispatcher
from django_delayq.management.lifecycle import configure_logging, stop_on_signals
from django_delayq.worker import Worker


class Command(BaseCommand):
    help = (
        "For development: a dispatcher and a worker in one process. In "
        "production run delayq_dispatch and delayq_worker separately."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="A queue to serve (repeatable). Default: every configured queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=1,
            help="Worker threads (default 1).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        dispatcher = Dispatcher(options["queues"])
        worker = Worker(options["queues"], concurrency=options["concurrency"])

        def stop() -> None:
            dispatcher.stop()
            worker.stop()

        stop_on_signals(stop, "delayq_run")
        thread = threading.Thread(target=dispatcher.run, name="delayq-dispatcher")
        thread.start()
        try:
            worker.run()
        finally:
            dispatcher.stop()
            thread.join()
