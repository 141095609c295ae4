"""``manage.py delayq_tasks`` over many rows: rows/s and the command's peak RSS.

N scheduled tasks are written with ``schedule_many()`` (batches of 1,000,
due a day ahead: nothing runs them), then ``delayq_tasks`` runs as a real
``python -m django delayq_tasks ...`` process, its output to ``/dev/null``:

* ``list --json --name NAME``: every row as a JSON line;
* ``cancel --yes --name NAME``: every row cancelled (each through
  ``cancel()``: its own transaction, then its due-set entry removed);
* ``run-now --yes --name NAME``: every row made due now (``reschedule()``
  with ``delay=0``: its own transaction, then re-indexed).

Rows/s is N over the process's wall time (interpreter and Django start-up
included: ``startup`` is that of a ``list`` matching nothing). Peak RSS is
the process's own ``ru_maxrss`` (``os.wait4``), at N and at N/10 rows: a
command that reads in batches peaks at about the same RSS at both.

Baselines, in this process, in the same rounds (the side that goes first
alternates): ``list``, the same columns read with ``values()`` in batches
of 500 by primary key and ``json.dumps``-ed to ``/dev/null``; ``cancel``
and ``run-now``, the same rows changed by hand: batches of 500 ids, one
``DelayedTask.objects.filter(pk__in=...).update(...)`` each, then the
due-set entries removed (``ZREM``) or moved (``ZADD``) with redis-py in one
pipeline per batch.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.tasks_command --tasks 100000 --repeats 3

Every loop is bounded by a row count, and every process by a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

#: Rows per query and per transaction of the baselines (the command's
#: default ``--batch-size``).
BATCH = 500
#: Rows per ``schedule_many()`` call when seeding.
SEED_BATCH = 1000
#: How far ahead the seeded tasks are due: no process runs them meanwhile.
AHEAD_S = 86_400


def setup() -> None:
    from benchmarks.scenarios.end_to_end import setup as setup_django

    setup_django("postgres")


def _reset() -> None:
    from benchmarks.scenarios.end_to_end import bench_client
    from benchmarks.scenarios.schedule_rate import analyze_task_table
    from django_delayq.models import DelayedTask

    DelayedTask.objects.all().delete()
    bench_client().flushall()
    analyze_task_table()


def seed(n: int) -> None:
    """``n`` scheduled noop tasks, indexed in Redis, with fresh statistics."""
    from benchmarks.harness.benchapp.tasks import noop
    from benchmarks.scenarios.schedule_rate import analyze_task_table
    from django_delayq import Call, schedule_many

    _reset()
    for start in range(0, n, SEED_BATCH):
        schedule_many(
            Call(noop, args=[i], delay=AHEAD_S)
            for i in range(start, min(n, start + SEED_BATCH))
        )
    analyze_task_table()


def command(*args: str, timeout: float) -> tuple[float, float]:
    """Run ``delayq_tasks *args`` as a process of its own, its output to
    /dev/null; its wall time (s) and peak RSS (MiB)."""
    argv = [sys.executable, "-m", "django", "delayq_tasks", *args]
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors
        )
        # os.wait4 gives this child's own rusage (RUSAGE_CHILDREN would be
        # the largest of every child so far); a timer bounds the wait.
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        took = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            errors.seek(0)
            tail = errors.read()[-2000:].decode(errors="replace")
            raise RuntimeError(
                f"delayq_tasks {' '.join(args)} exited {process.returncode}: {tail}"
            )
    return took, usage.ru_maxrss / 1024  # KiB on Linux


def _id_batches() -> Iterator[list[Any]]:
    """The ids in batches, written by hand as a user would (the baseline
    uses none of the package's own batching, whose cost is measured)."""
    from django_delayq.models import DelayedTask

    last = None
    while True:
        page = DelayedTask.objects.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        ids = list(page.values_list("pk", flat=True)[:BATCH])
        if not ids:
            return
        yield ids
        last = ids[-1]


def baseline_list() -> None:
    """The list's columns, read in batches by hand and written as JSON."""
    from django.core.serializers.json import DjangoJSONEncoder

    from django_delayq.management.bulk import LIST_FIELDS
    from django_delayq.models import DelayedTask

    last = None
    with open(os.devnull, "w") as out:
        while True:
            page = DelayedTask.objects.order_by("pk")
            if last is not None:
                page = page.filter(pk__gt=last)
            rows = list(page.values(*LIST_FIELDS)[:BATCH])
            if not rows:
                return
            for row in rows:
                out.write(json.dumps(row, cls=DjangoJSONEncoder) + "\n")
            last = rows[-1]["id"]


def _due_key() -> str:
    from django_delayq.conf import get_settings
    from django_delayq.store.keys import shard_keys

    return shard_keys(get_settings().key_prefix, "default", 0).due


def baseline_cancel() -> None:
    """Each batch: one fenced UPDATE, then one ZREM of its members."""
    from django.db import transaction
    from django.utils import timezone

    from benchmarks.scenarios.end_to_end import bench_client
    from django_delayq.models import DelayedTask, Status

    client, due = bench_client(), _due_key()
    for ids in _id_batches():
        with transaction.atomic():
            DelayedTask.objects.filter(pk__in=ids, status=Status.SCHEDULED).update(
                status=Status.CANCELLED, finished_at=timezone.now()
            )
        client.zrem(due, *(task_id.bytes for task_id in ids))


def baseline_run_now() -> None:
    """Each batch: one fenced UPDATE of ``run_at``, then one ZADD."""
    from django.db import transaction
    from django.utils import timezone

    from benchmarks.scenarios.end_to_end import bench_client
    from django_delayq.models import DelayedTask, Status
    from django_delayq.timing import to_score

    client, due = bench_client(), _due_key()
    for ids in _id_batches():
        now = timezone.now()
        with transaction.atomic():
            DelayedTask.objects.filter(pk__in=ids, status=Status.SCHEDULED).update(
                run_at=now
            )
        client.zadd(
            due, dict.fromkeys((task_id.bytes for task_id in ids), to_score(now))
        )


def _timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _check(status: str, n: int, action: str) -> None:
    """Every row changed as asked: a figure of a partial run is no figure."""
    from django_delayq.models import DelayedTask

    found = DelayedTask.objects.filter(status=status).count()
    if found != n:
        raise RuntimeError(f"{action}: {found} of {n} rows {status}")


#: The actions measured, as the command names them.
ACTIONS = ("list", "cancel", "run-now")


def _round(
    n: int, name: str, actions: Sequence[str], ours_first: bool, timeout: float
) -> dict[str, float]:
    """One round at ``n`` rows: each action by the command and by hand."""
    from django.utils import timezone

    from django_delayq.models import DelayedTask, Status

    figures: dict[str, float] = {}
    if "list" in actions:
        seed(n)
        took, rss = command("list", "--json", "--name", name, timeout=timeout)
        figures.update(list_s=took, list_rss_mib=rss)
        figures["list_baseline_s"] = _timed(baseline_list)
    for action, baseline, status in (
        ("cancel", baseline_cancel, Status.CANCELLED),
        ("run-now", baseline_run_now, Status.SCHEDULED),
    ):
        if action not in actions:
            continue
        key = action.replace("-", "_")

        def ours(action: str = action, key: str = key) -> None:
            took, rss = command(action, "--yes", "--name", name, timeout=timeout)
            figures.update({f"{key}_s": took, f"{key}_rss_mib": rss})

        def base(baseline: Callable[[], None] = baseline, key: str = key) -> None:
            figures[f"{key}_baseline_s"] = _timed(baseline)

        for side in (ours, base) if ours_first else (base, ours):
            seed(n)
            side()
            if action == "run-now":
                late = DelayedTask.objects.filter(run_at__gt=timezone.now())
                if late.exists():
                    raise RuntimeError(f"run-now: {late.count()} rows not due")
            _check(status, n, action)
    return figures


def run(n: int, small: int, repeats: int, actions: Sequence[str]) -> dict[str, Any]:
    setup()
    import django_delayq
    from benchmarks.harness.benchapp.tasks import noop

    name = noop.name
    # Room for a command as slow as 50 rows/s before the run gives up:
    # cancel and run-now change one task per transaction, a few hundred a
    # second on a quiet 2-core machine and under a hundred on a busy one.
    timeout = 120 + n / 50
    _reset()
    startup, startup_rss = command("list", "--name", "nothing-matches", timeout=120)
    rounds, small_rounds = [], []
    for number in range(repeats):
        ours_first = number % 2 == 0
        small_rounds.append(_round(small, name, actions, ours_first, timeout))
        rounds.append(_round(n, name, actions, ours_first, timeout))
    _reset()
    result: dict[str, Any] = {
        "n": n,
        "small_n": small,
        "repeats": repeats,
        "batch": BATCH,
        "startup_s": startup,
        "startup_rss_mib": startup_rss,
        # Which tree was measured: the harness puts the repository first.
        "package": os.path.dirname(django_delayq.__file__),
    }
    for action in (a.replace("-", "_") for a in actions):
        result[action] = {
            **_spread(rounds, f"{action}_s", n),
            **_spread(rounds, f"{action}_baseline_s", n, "baseline_"),
            "rss_mib": _spread_of([r[f"{action}_rss_mib"] for r in rounds]),
            "small_rss_mib": _spread_of([r[f"{action}_rss_mib"] for r in small_rounds]),
            "small_rows_per_s": statistics.median(
                small / r[f"{action}_s"] for r in small_rounds
            ),
        }
    return result


def _spread_of(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def _spread(
    rounds: list[dict[str, float]], key: str, n: int, prefix: str = ""
) -> dict[str, Any]:
    """Rows/s of ``key``'s times: the median with its min and max."""
    return {f"{prefix}rows_per_s": _spread_of([n / r[key] for r in rounds])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="rows (N)")
    parser.add_argument(
        "--small", type=int, default=None, help="rows of the RSS comparison (N/10)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--actions",
        default=",".join(ACTIONS),
        help=f"comma-separated, of {', '.join(ACTIONS)} (default: all)",
    )
    args = parser.parse_args()
    actions = [a for a in args.actions.split(",") if a]
    unknown = set(actions) - set(ACTIONS)
    if unknown:
        parser.error(f"--actions: unknown {', '.join(sorted(unknown))}")
    small = args.small or max(1, args.tasks // 10)
    result = run(args.tasks, small, args.repeats, actions)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"delayq_tasks over {args.tasks:,} rows (PostgreSQL), {args.repeats} round(s)"
    )
    for action in (a.replace("-", "_") for a in actions):
        r = result[action]
        print(
            f"  {action}: {r['rows_per_s']['median']:,.0f} rows/s, by hand "
            f"{r['baseline_rows_per_s']['median']:,.0f} rows/s; peak RSS "
            f"{r['rss_mib']['median']:.0f} MiB at {args.tasks:,}, "
            f"{r['small_rss_mib']['median']:.0f} MiB at {small:,}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
