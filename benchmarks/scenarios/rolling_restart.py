"""A rolling restart under a steady load: what a deploy adds to lateness.

Each run schedules the same steady load twice (``--rate`` one-row tasks a
second over ``--window`` seconds, ``schedule_many()`` ahead of time), with a
dispatcher and ``--workers`` worker processes running:

- **steady**: nothing restarts (the baseline of the same run);
- **rolling**: a quarter into the window, every process is replaced one by
  one, as a deploy does: a new dispatcher starts, then the old one gets
  SIGTERM and exits; then for each worker a new one starts and blocks in its
  first read, and the old one gets SIGTERM and exits.

Lateness is read from the rows (``started_at - run_at``, the moment the
task function starts) over every task of the window. The figure to watch is
the p99 of the rolling scenario against the steady one of the same run.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.rolling_restart --db postgres --runs 3

Prints one JSON object (``--json``) or a line per run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.harness.stats import lateness_summary
from benchmarks.scenarios.end_to_end import (
    _blocked_readers,
    _command,
    bench_client,
    setup,
)

#: How long a process may take to start or to stop before the run fails.
PROCESS_TIMEOUT = 60.0


class Processes:
    """The dispatcher and workers of one scenario, replaced one by one."""

    def __init__(self, workers: int) -> None:
        self.client = bench_client()
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.dispatcher = self._start("delayq_dispatch")
        self.workers = [self._start("delayq_worker") for _ in range(workers)]
        self._wait(lambda: _blocked_readers(self.client) >= workers, "the workers")
        self._wait(
            lambda: self.client.exists("delayq:{default:0}:lease"), "the dispatcher"
        )

    def _start(self, command: str) -> subprocess.Popen[bytes]:
        argv = _command(command, "-v", "0")
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL)

    def _wait(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {PROCESS_TIMEOUT} s")
            time.sleep(0.05)

    def _stop(self, process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=PROCESS_TIMEOUT)
        if process.returncode != 0:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")

    def roll(self) -> None:
        """Replace the dispatcher, then each worker, as a deploy does."""
        old = self.dispatcher
        self.dispatcher = self._start("delayq_dispatch")
        members = "delayq:dispatchers:default"
        self._wait(lambda: self.client.zcard(members) >= 2, "the new dispatcher")
        self._stop(old)
        for number, old in enumerate(list(self.workers)):
            new = self.workers[number] = self._start("delayq_worker")
            # Its heartbeat: it is running, and stops gracefully when told
            # (a process told to stop while still starting would just die).
            self._wait(
                lambda new=new: self._alive(new) or new.poll() is not None,
                "the new worker",
            )
            self._stop(old)

    def _alive(self, worker: subprocess.Popen[bytes]) -> bool:
        """Whether ``worker``'s heartbeat is in ``<prefix>:workers``."""
        from django_delayq.store.keys import workers_key

        members = self.client.zrange(workers_key("delayq"), 0, -1)
        return any(f":{worker.pid}:".encode() in member for member in members)

    def stop(self) -> None:
        for process in [self.dispatcher, *self.workers]:
            if process.poll() is None:
                self._stop(process)


def scenario(rate: int, window: float, workers: int, rolling: bool) -> dict[str, Any]:
    from django.utils import timezone

    from benchmarks.harness.benchapp.models import BenchRow
    from benchmarks.harness.benchapp.tasks import KINDS
    from django_delayq import Call, schedule_many
    from django_delayq.models import DelayedTask, Status

    bench_client().flushall()
    DelayedTask.objects.all().delete()
    BenchRow.objects.all().delete()
    n = int(rate * window)
    processes = Processes(workers)
    try:
        lead = 1.0 + n / 5000
        first = timezone.now() + datetime.timedelta(seconds=lead)
        step = datetime.timedelta(seconds=window / n)
        for start in range(0, n, 5000):
            schedule_many(
                Call(KINDS["write_row"], args=[i], eta=first + step * i)
                for i in range(start, min(n, start + 5000))
            )
        if rolling:
            wait = (first - timezone.now()).total_seconds() + window / 4
            time.sleep(max(wait, 0))  # pacing: the restart starts mid-load
            restart_began = time.monotonic()
            processes.roll()
            restart_s = time.monotonic() - restart_began
        deadline = time.monotonic() + lead + window + 120
        pending = n
        while time.monotonic() < deadline and pending:
            pending = DelayedTask.objects.filter(
                status__in=[Status.SCHEDULED, Status.RUNNING]
            ).count()
            time.sleep(0.2)
    finally:
        processes.stop()
    rows = DelayedTask.objects.filter(status=Status.SUCCEEDED).values_list(
        "run_at", "started_at"
    )
    late = [(started - run_at).total_seconds() * 1000 for run_at, started in rows]
    summary: dict[str, Any] = lateness_summary(late, n)
    summary["unfinished"] = pending
    if rolling:
        summary["restart_s"] = restart_s
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--rate", type=int, default=100, help="tasks per second")
    parser.add_argument("--window", type=float, default=20.0, help="seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    runs = []
    for number in range(args.runs):
        steady = scenario(args.rate, args.window, args.workers, rolling=False)
        rolling = scenario(args.rate, args.window, args.workers, rolling=True)
        runs.append({"steady": steady, "rolling": rolling})
        if not args.json:
            print(
                f"run {number + 1}: p99 steady {steady['p99_ms']:.1f} ms, "
                f"rolling {rolling['p99_ms']:.1f} ms "
                f"(max {rolling['max_ms']:.1f} ms, restart took "
                f"{rolling['restart_s']:.1f} s)"
            )
    added = [r["rolling"]["p99_ms"] - r["steady"]["p99_ms"] for r in runs]
    result = {
        "rate": args.rate,
        "window_s": args.window,
        "workers": args.workers,
        "runs": runs,
        "p99_added_ms_median": statistics.median(added),
        "p99_added_ms": added,
    }
    if args.json:
        print(json.dumps(result))
    else:
        median = result["p99_added_ms_median"]
        print(
            f"p99 added by a rolling restart: median {median:.1f} ms over "
            f"{args.runs} runs ({', '.join(f'{a:.1f}' for a in added)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
