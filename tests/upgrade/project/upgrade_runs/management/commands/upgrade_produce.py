"""Schedule ``record_run`` tasks, as a shop's web processes would, until
SIGTERM; then write what was scheduled and what failed to ``--report``.

Run by both releases, so it uses only what both have: ``schedule()`` with
``delay=``, ``args=`` and ``key=``, and ``priority=`` only when asked to.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_delayq import schedule

from ...tasks import record_run

#: The priorities ``--priorities`` cycles through: high, normal, low.
PRIORITIES = (5, 0, -5)


class Command(BaseCommand):
    help = "Schedule record_run tasks until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--release", required=True, help="the keys' prefix")
        parser.add_argument("--report", required=True, type=Path)
        parser.add_argument("--rate", type=float, default=10.0)
        parser.add_argument("--max-delay", type=float, default=2.0)
        parser.add_argument(
            "--backlog", type=int, default=0, help="tasks scheduled first"
        )
        parser.add_argument("--backlog-span", type=float, default=20.0)
        parser.add_argument("--priorities", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        release: str = options["release"]
        rng = random.Random(release)
        scheduled: list[str] = []
        failed: list[str] = []

        def one(delay: float) -> None:
            number = len(scheduled) + len(failed)
            key = f"{release}-{number}"
            extra: dict[str, Any] = {}
            if options["priorities"]:
                extra["priority"] = PRIORITIES[number % len(PRIORITIES)]
            try:
                schedule(record_run, args=[key], key=key, delay=delay, **extra)
            except Exception as exc:  # counted: the test asserts there are none
                failed.append(f"{key}: {type(exc).__name__}: {exc}")
                self.stdout.write(f"schedule failed: {failed[-1]}", ending="\n")
                self.stdout.flush()
            else:
                scheduled.append(key)

        for _ in range(options["backlog"]):
            one(rng.uniform(options["max_delay"], options["backlog_span"]))
        self.stdout.write(f"producer {release}: backlog scheduled\n")
        self.stdout.flush()
        pause = 1.0 / options["rate"]
        while not stop.is_set():
            one(rng.uniform(0.0, options["max_delay"]))
            stop.wait(pause)
        report = {"scheduled": scheduled, "failed": failed}
        options["report"].write_text(json.dumps(report))
        self.stdout.write(
            f"producer {release}: scheduled {len(scheduled)}, failed {len(failed)}\n"
        )
