"""``delayq_worker``'s process options: how many, recycling, the grace period."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ..supervisor.child import Recycling

MAX_PROCESSES = 64

#: Seconds a supervisor's graceful stop may take before it kills its children.
DEFAULT_GRACE_PERIOD = 30.0

_SUPERVISOR_OPTIONS = (
    "--processes",
    "--max-tasks-per-child",
    "--max-memory-per-child",
    "--grace-period",
)


@dataclass(frozen=True)
class ProcessOptions:
    processes: int
    recycling: Recycling
    grace_period: float


def add_process_options(parser: CommandParser) -> None:
    """The options that make the command a supervisor of worker processes."""
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help=(
            "Worker processes, each with --concurrency threads (default 1). "
            "With more than 1 this process supervises them."
        ),
    )
    parser.add_argument(
        "--max-tasks-per-child",
        type=int,
        default=None,
        metavar="N",
        help="Replace a worker process after it ran N tasks.",
    )
    parser.add_argument(
        "--max-memory-per-child",
        type=int,
        default=None,
        metavar="MiB",
        help="Replace a worker process whose resident memory exceeds this.",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=None,
        metavar="SECONDS",
        help=(
            "How long a supervisor's graceful stop may take before it kills "
            f"the worker processes (default {DEFAULT_GRACE_PERIOD:g})."
        ),
    )


def process_options(options: dict[str, Any]) -> ProcessOptions | None:
    """The supervisor's settings, or ``None`` to run the worker in this process.

    Recycling and the grace period need a process that outlives the worker,
    so any of them means a supervisor, even of a single worker process.
    """
    processes: int = options["processes"]
    max_tasks: int | None = options["max_tasks_per_child"]
    max_memory: int | None = options["max_memory_per_child"]
    grace: float | None = options["grace_period"]
    if not 1 <= processes <= MAX_PROCESSES:
        raise CommandError(
            f"--processes must be from 1 to {MAX_PROCESSES}; got {processes}. "
            f"Use about one per CPU core, and --concurrency for more tasks at once."
        )
    if max_tasks is not None and max_tasks < 1:
        raise CommandError(
            f"--max-tasks-per-child must be a positive number of tasks, "
            f"e.g. 1000; got {max_tasks}. Leave it out to never recycle by count."
        )
    if max_memory is not None and max_memory < 1:
        raise CommandError(
            f"--max-memory-per-child must be a positive number of MiB, e.g. 512; "
            f"got {max_memory}. Leave it out to never recycle by memory."
        )
    if grace is not None and not (math.isfinite(grace) and grace >= 0):
        raise CommandError(
            f"--grace-period must be a number of seconds, 0 or more; got {grace}."
        )
    if processes == 1 and max_tasks is None and max_memory is None and grace is None:
        return None
    if options["once"]:
        raise CommandError(
            "--once runs the worker in this process: leave out "
            f"{', '.join(_SUPERVISOR_OPTIONS)}."
        )
    return ProcessOptions(
        processes,
        Recycling(max_tasks=max_tasks, max_memory_mib=max_memory),
        DEFAULT_GRACE_PERIOD if grace is None else grace,
    )
