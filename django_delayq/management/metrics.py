"""``--metrics-port`` and ``--metrics-addr``, shared by the long-running
commands: serving ``/metrics`` while the command runs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser

from ..exceptions import MetricsUnavailable
from ..metrics import INSTALL

if TYPE_CHECKING:
    from ..supervisor.companion import Companion

logger = logging.getLogger("django_delayq.metrics")

DEFAULT_ADDR = "127.0.0.1"


def add_metrics_options(parser: CommandParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help=(
            "Serve Prometheus metrics on http://ADDR:PORT/metrics (needs "
            "django-delayq[prometheus]). Default: no metrics."
        ),
    )
    parser.add_argument(
        "--metrics-addr",
        default=DEFAULT_ADDR,
        metavar="ADDR",
        help=f"The address --metrics-port listens on (default {DEFAULT_ADDR}).",
    )


def check_metrics_options(options: dict[str, Any]) -> None:
    """Refuse bad metrics options before anything starts."""
    port, addr = options["metrics_port"], options["metrics_addr"]
    if port is None:
        if addr != DEFAULT_ADDR:
            raise CommandError("--metrics-addr needs --metrics-port PORT.")
        return
    if not 1 <= port <= 65535:
        raise CommandError(f"--metrics-port must be from 1 to 65535; got {port}.")
    if not addr:
        raise CommandError("--metrics-addr must not be empty.")


@contextlib.contextmanager
def metrics_served(
    options: dict[str, Any], *, supervisor: bool = False
) -> Iterator[Companion | None]:
    """Serve metrics while the block runs, if ``--metrics-port`` was given.

    ``supervisor``: the command forks worker processes in the block; their
    metrics are summed (:class:`~django_delayq.metrics.server.AggregateServer`),
    by the process the block gets, for the supervisor to keep running.
    """
    check_metrics_options(options)
    port, addr = options["metrics_port"], options["metrics_addr"]
    if port is None:
        yield None
        return
    # Imported here: the module imports prometheus-client only when called,
    # and only once the multi-process directory is set.
    from ..metrics import server

    aggregate = None
    try:
        if supervisor:
            aggregate = server.AggregateServer(addr, port)
            aggregate.start()
            stop = aggregate.stop
        else:
            stop = server.serve_this_process(addr, port)
    except MetricsUnavailable as exc:
        raise CommandError(
            f"--metrics-port needs prometheus-client, which is not installed: {INSTALL}"
            if isinstance(exc.__cause__, ImportError)
            else f"--metrics-port: {exc}"
        ) from exc
    except OSError as exc:
        raise CommandError(
            f"--metrics-port {port}: cannot serve metrics on {addr}:{port}: {exc}"
        ) from exc
    logger.info("metrics at http://%s:%d/metrics", addr, port)
    try:
        yield aggregate
    finally:
        stop()
