from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_delayq.management.lifecycle import option_errors
from django_delayq.status import Report, collect
from django_delayq.text import printable


class Command(BaseCommand):
    help = (
        "The health of django-delayq at a glance: backlogs per shard, overdue "
        "tasks, the outbox, live dispatchers, workers and sweepers, tasks that "
        "failed in the last hour, periodic schedules behind. Exits 0 healthy, "
        "1 degraded, 2 down (for probes)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="Print the report as JSON."
        )
        parser.add_argument(
            "--overdue",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="Tasks overdue, or outbox entries older, by more than this "
            "make the status degraded (default 60).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with option_errors():
            if not 0 <= options["overdue"] <= 30 * 86400:  # refuses nan and inf
                raise ValueError(
                    f"--overdue must be from 0 to 2592000 seconds; got "
                    f"{options['overdue']}."
                )
        report = collect(overdue_after=options["overdue"])
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            self.stdout.write(_text(report))
        self.stdout.flush()
        if report.level:
            sys.exit(report.level)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  "
        + "  ".join(
            cell.ljust(width) for cell, width in zip(row, widths, strict=True)
        ).rstrip()
        for row in [header, *rows]
    ]


def _text(report: Report) -> str:
    # The names of the processes and the queues they serve are read from
    # Redis, where anyone with write access there can put anything: shown
    # escaped and clipped, so that they cannot drive the terminal (ESC),
    # forge a line, or bury the report. --json escapes them its own way.
    lines = [f"django-delayq: {report.state}"]
    lines += [f"  - {problem}" for problem in report.problems]
    tasks = ", ".join(f"{status} {n}" for status, n in sorted(report.tasks.items()))
    lines.append(f"Database: {report.database}" + (f"; {tasks}" if tasks else ""))
    if report.failed_last_hour is not None:
        lines.append(f"Failed in the last hour: {report.failed_last_hour}")
    lines.append(
        f"Outbox: {report.outbox} entr{'y' if report.outbox == 1 else 'ies'}"
        + (f", the oldest from {report.oldest_outbox}" if report.oldest_outbox else "")
    )
    if report.periodic:
        states = Counter(schedule.state for schedule in report.periodic)
        behind = sum(schedule.behind for schedule in report.periodic)
        lines.append(
            f"Periodic schedules: {len(report.periodic)} ("
            + ", ".join(f"{state} {states[state]}" for state in sorted(states))
            + f"), behind {behind}"
        )
    if report.waiting_for_limits:
        lines.append(
            f"Waiting for limits: {report.waiting_for_limits} task(s) due, "
            f"not late (see Limits)"
        )
    for paused in report.paused:
        by = f" by {printable(paused.paused_by)}" if paused.paused_by else ""
        why = f" ({printable(paused.reason)})" if paused.reason else ""
        lines.append(
            f"Paused: queue {paused.queue} since {paused.paused_at}{by}{why}; "
            f"{paused.due} task(s) due wait for its resume"
        )
    lines.append(f"Redis: {report.redis}")
    if report.shards:
        header = (
            "shard",
            "due",
            "next due",
            "waiting",
            "in flight",
            "dead",
            "dispatcher",
        )
        rows = [
            (
                s.shard,
                str(s.due),
                s.next_due or "-",
                str(s.waiting),
                str(s.in_flight),
                str(s.dead),
                printable(s.dispatcher) if s.dispatcher else "none",
            )
            for s in report.shards
        ]
        lines += _table(header, rows)
    if report.limits:
        lines.append("Limits:")
        lines += _table(
            (
                "queue",
                "limit",
                "allows",
                "running",
                "waiting",
                "keys",
                "throttled",
                "waited",
            ),
            [
                (
                    state.queue,
                    printable(state.limit),
                    state.rule,
                    str(state.running),
                    str(state.waiting),
                    str(state.keys_waiting),
                    str(state.throttled),
                    f"{state.waited_seconds:.1f} s",
                )
                for state in report.limits
            ],
        )
    for token, shards in sorted(report.dispatchers.items()):
        lines.append(f"Dispatcher {printable(token)}: {', '.join(shards)}")
    for name, queues in sorted(report.workers.items()):
        lines.append(f"Worker {printable(name)}: {printable(', '.join(queues))}")
    for token, sweeper in sorted(report.sweepers.items()):
        lines.append(
            f"Sweeper {printable(token)}: every {sweeper.interval:g} s, last "
            f"pass ended at {sweeper.last_pass}"
        )
    return "\n".join(lines)
