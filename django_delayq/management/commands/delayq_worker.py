from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from django_delayq.exceptions import RedisUnavailable, WorkerStuck
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
from django_delayq.management.processes import add_process_options, process_options
from django_delayq.models import write_db
from django_delayq.store.errors import error_text
from django_delayq.supervisor import Supervisor
from django_delayq.worker import Worker

#: The exit status of a worker that gave up on a task it could not
#: interrupt (EX_SOFTWARE): restart it.
EXIT_STUCK = 70

IN_TRANSACTION = (
    "delayq_worker cannot run inside a transaction (django.test.TestCase "
    "wraps every test in one): its threads use database connections of their "
    "own, which would not see that transaction's rows (and on SQLite would be "
    "locked out of the database). Run it from a TransactionTestCase (with "
    "pytest-django, @pytest.mark.django_db(transaction=True))."
)


def caller_in_transaction() -> bool:
    """Whether this thread holds a transaction on the task rows' database."""
    alias = write_db()
    return connections[alias].in_atomic_block


class Command(BaseCommand):
    help = "Run the tasks the dispatchers make ready. Run one or more."

    def add_arguments(self, parser: CommandParser) -> None:
        add_queue_option(parser)
        add_worker_options(parser)
        add_process_options(parser)
        add_metrics_options(parser)
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
        def make_worker() -> Worker:
            return Worker(
                options["queues"],
                **worker_options(options),
                visibility_timeout=options["visibility_timeout"],
            )

        if caller_in_transaction():
            raise CommandError(IN_TRANSACTION)
        with option_errors():
            # Also under a supervisor: a bad option stops the command here,
            # before any worker process starts.
            check_metrics_options(options)
            worker = make_worker()
        supervised = process_options(options)
        verbosity = options["verbosity"]
        killed: list[int] = []
        if supervised is None:
            with (
                command_context(worker.stop, "delayq_worker", verbosity),
                metrics_served(options),
            ):
                try:
                    stats = worker.run(once=options["once"])
                except (RedisUnavailable, DatabaseError) as exc:
                    # Only --once gets here: a worker that runs on waits for
                    # Redis and the database, logging each failure.
                    raise CommandError(f"worker failed: {error_text(exc)}") from exc
                except WorkerStuck as exc:
                    # The stuck thread cannot be stopped; only the process
                    # can. Its process manager starts a fresh one.
                    self.stderr.write(f"delayq_worker: {exc}")
                    raise SystemExit(EXIT_STUCK) from None
            processed, dead, reclaimed = (
                stats.processed,
                stats.dead_lettered,
                stats.reclaimed,
            )
        else:
            supervisor = Supervisor(
                make_worker,
                processes=supervised.processes,
                recycling=supervised.recycling,
                grace_period=supervised.grace_period,
            )
            with (
                command_context(
                    supervisor.stop, "delayq_worker", verbosity, force=supervisor.kill
                ),
                metrics_served(options, supervisor=True) as metrics,
            ):
                supervisor.keep(metrics)  # restarted if it dies
                totals = supervisor.run()
            if supervisor.refused is not None:
                raise CommandError(supervisor.refused)
            killed = totals.killed
            processed, dead, reclaimed = (
                totals.processed,
                totals.dead_lettered,
                totals.reclaimed,
            )
        if verbosity:
            self.stdout.write(
                f"delayq_worker: {processed} processed, "
                f"{dead} dead-lettered, {reclaimed} reclaimed"
            )
        if killed:
            assert supervised is not None
            raise CommandError(
                f"killed {len(killed)} worker process(es) still running "
                f"after the grace period of {supervised.grace_period:g} s; the "
                f"tasks they were running were rolled back and handed back."
            )
