"""What the long-running commands share: logging, signals, option errors."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ..conf import get_settings
from ..exceptions import DelayQueueException, InvalidConfiguration
from ..worker import DEFAULT_PREFETCH
from ..worker.group_commit import DEFAULT_BUDGET, DEFAULT_MAX_SIZE

_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


@contextlib.contextmanager
def command_context(
    stop: Callable[[], None],
    what: str,
    verbosity: int,
    *,
    force: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Set up logging and signal handling for one command run, then undo both.

    ``force``, if given, runs on the second signal, just before the exit (a
    supervisor kills its children there).

    Undoing matters when a command runs through ``call_command()`` inside
    another program (a test suite): its handlers and log level come back.
    """
    refuse_test_mode(what)
    logger = logging.getLogger("django_delayq")
    level, handlers = logger.level, list(logger.handlers)
    logger.setLevel(_LEVELS.get(verbosity, logging.INFO))
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
        )
        logger.addHandler(handler)
    previous = _install_signal_handlers(stop, what, force)
    try:
        yield
    except InvalidConfiguration as exc:
        # Found by the loop itself (a KEY_PREFIX another project holds):
        # already logged; the command says it and exits non-zero.
        raise CommandError(str(exc)) from exc
    finally:
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)
        logger.setLevel(level)
        logger.handlers[:] = handlers


def refuse_test_mode(what: str) -> None:
    """Refuse to run a loop under ``DELAYQ["TEST_MODE"]``.

    In a test mode ``schedule()`` writes nothing to Redis (``"manual"``) or
    runs the task at once (``"immediate"``): a loop started with it is a
    test settings module deployed, whose sweeper would index the rows and
    run them a sweep interval late. Tests run what is due with ``run_due()``.
    """
    mode = get_settings().test_mode
    if mode is not None:
        raise CommandError(
            f'{what} does not run with DELAYQ["TEST_MODE"] = {mode!r}: a test '
            f"mode is for tests, which run what is due with "
            f"django_delayq.testing.run_due(). Remove TEST_MODE from the "
            f"settings this process uses (check --deploy reports it as "
            f"delayq.E017)."
        )


def add_queue_option(parser: CommandParser) -> None:
    """``--queue NAME`` (repeatable), shared by the long-running commands."""
    parser.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="A queue to serve (repeatable). Default: every configured queue.",
    )


def add_worker_options(parser: CommandParser) -> None:
    """``--concurrency``, ``--prefetch`` and the group options, shared by the
    commands that run tasks."""
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="Threads, each running one task at a time (default 1).",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        default=DEFAULT_PREFETCH,
        help=(
            "Entries a thread reads from each ready stream at once (default "
            f"{DEFAULT_PREFETCH}): more saves Redis round trips under load, "
            "fewer shares long tasks better between workers."
        ),
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=DEFAULT_MAX_SIZE,
        help=(
            f"Tasks committed together at most (default {DEFAULT_MAX_SIZE}); "
            "1 commits each task on its own."
        ),
    )
    parser.add_argument(
        "--group-budget",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help=(
            f"How long a group of tasks may run before it commits (default "
            f"{DEFAULT_BUDGET})."
        ),
    )


def worker_options(options: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :class:`~django_delayq.worker.Worker` that
    :func:`add_worker_options` parsed."""
    return {
        "concurrency": options["concurrency"],
        "prefetch": options["prefetch"],
        "group_size": options["group_size"],
        "group_budget": options["group_budget"],
    }


@contextlib.contextmanager
def option_errors() -> Iterator[None]:
    """Report a bad option or setting as a command error, not a traceback."""
    try:
        yield
    except (ValueError, DelayQueueException) as exc:
        raise CommandError(str(exc)) from exc


_Handler = Callable[[int, FrameType | None], object] | int | None


def _install_signal_handlers(
    stop: Callable[[], None], what: str, force: Callable[[], None] | None
) -> dict[signal.Signals, _Handler]:
    """SIGTERM or SIGINT once: ``stop()`` gracefully; a second one: exit now.

    Only the main thread may install handlers; elsewhere (a command run from
    a thread) stopping is left to the caller.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            # A graceful stop is the normal end of a deploy: INFO, not a
            # warning an operator would have to look into.
            logging.getLogger("django_delayq").info(
                "%s: %s received, finishing what is in flight (send it again to "
                "exit at once)",
                what,
                name,
            )
            stop()
        else:
            # Work in flight is abandoned: its transactions roll back and its
            # stream entries stay pending, so another worker reclaims them.
            if force is not None:
                force()
            os._exit(128 + signum)

    previous: dict[signal.Signals, _Handler] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, handle)
    return previous
