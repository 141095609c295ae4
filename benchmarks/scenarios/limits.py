"""Flow control: concurrency and rate limits held, fairness between keys, and
what limits cost, with real dispatcher and worker processes on PostgreSQL.

One dispatcher and ``--workers`` worker processes of ``--threads`` threads
each (``delayq_worker --concurrency``) run one-row tasks, those of
``benchmarks/harness/benchapp/limited_tasks.py``: each writes one row with
the moment its function started and the moment its insert ran, which is
what the figures are computed from (``DELAYQ_BENCH_LIMITS``, which this
scenario sets for itself and its processes, registers them and their queue
``"limited"``). In each of ``--runs`` runs (each part on fresh processes
and data, except that the unlimited and never-binding cost parts and the
concurrency parts share processes, their rows cleared in between, as long
as each part finished all its tasks):

- **concurrency**: ``--tasks`` tasks of ``concurrency_limit=N`` (N = 1, 5),
  all due at once. Most at once: the largest number of runs overlapping
  (must be at most N). Utilisation, while tasks wait (from the first start
  to the last): the time-weighted mean of functions running over N, and of
  slots held over N (the limit's ``usage()`` sampled every 10 ms while
  tasks wait): with one-row tasks a function takes a fraction of a
  millisecond and a slot's hand-off to the next task (release, admission,
  read, confirm, claim, commit) most of the time;
- **rate**: ``rate_limit="R/s"`` (``--rate``) offered 3R tasks a second,
  due evenly over ``--rate-window`` seconds. The most starts in any 1 s
  window (must be at most R) and the shortest span holding R + 1 starts
  (under 1 s would be a breach); achieved rate: starts in the window from
  the first start / the window (target: at least 0.95 R);
- **fairness**: ``concurrency_limit=1, limit_by="tenant"``. Key A has
  ``--fair-backlog`` tasks due at once; once they all wait, key B's
  ``--fair-keyed`` tasks are scheduled one at a time, ``--fair-gap`` s apart.
  B's start delay: its function's start minus the moment its own limit
  allowed it (its due time, or the end of B's previous run if later);
- **cost**: started/s of ``--tasks`` one-row tasks all due at once
  (``write_row`` of ``benchapp/tasks.py``; tasks / (last finish - first
  start), as ``end_to_end --all-due``). Baseline: processes of a project
  without limits. Against it, (a) the same unlimited tasks on processes of a
  project whose other tasks have limits (the default queue and the queue
  ``"limited"`` each with a limits shard, served and idle); (b)
  ``wide_open``, the same function under ``concurrency_limit=10000,
  rate_limit="100000/s"`` (on the default queue), against (a), and its
  admissions per task (more than 1: deliveries whose slots lapsed before a
  worker took them, admitted again).

Every figure comes as the median of the runs with its min and max; for the
limits held, the max is the one that counts.

    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.limits --runs 3
    python -m tools.servers run --redis --postgres -- \\
        python -m benchmarks.scenarios.limits --quick

Prints one JSON object (``--json``) or a few lines of figures.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Set for this process and the processes it starts: the tasks under limits
#: and their queue exist (benchapp/limited_tasks.py, harness/settings.py).
ENV = "DELAYQ_BENCH_LIMITS"

#: Seconds between two samples of a limit's use.
SAMPLE_EVERY = 0.01

#: (start, end) of one run, epoch seconds.
Interval = tuple[float, float]


# The figures: pure functions of what the rows say.


def max_overlap(intervals: Sequence[Interval]) -> int:
    """The most intervals open at once; one that ends when another starts
    does not overlap it (half-open ``[start, end)``)."""
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals]
    )
    most = running = 0
    for _, step in events:  # at one instant -1 sorts first: ends before starts
        running += step
        most = max(most, running)
    return most


def mean_running(intervals: Sequence[Interval], start: float, end: float) -> float:
    """The time-weighted mean number of ``intervals`` open over
    ``[start, end]``; NaN for an empty span."""
    if end <= start:
        return math.nan
    covered = sum(max(0.0, min(e, end) - max(s, start)) for s, e in intervals)
    return covered / (end - start)


def utilisation(
    intervals: Sequence[Interval], limit: int, start: float, end: float
) -> float:
    """The mean number running over ``[start, end]`` over the ``limit``."""
    return mean_running(intervals, start, end) / limit


def window_max(times: Sequence[float], width: float = 1.0) -> int:
    """The most of ``times`` in any window ``[t, t + width)``."""
    ordered = sorted(times)
    return max(
        (bisect.bisect_left(ordered, t + width) - i for i, t in enumerate(ordered)),
        default=0,
    )


def tightest_span(times: Sequence[float], count: int) -> float:
    """The shortest span holding ``count`` of ``times`` (inf if fewer)."""
    ordered = sorted(times)
    return min(
        (ordered[i + count - 1] - ordered[i] for i in range(len(ordered) - count + 1)),
        default=math.inf,
    )


def allowed_delays(runs: Sequence[tuple[float, float, float]]) -> list[float]:
    """For the runs ``(due, start, end)`` of one key under a limit of one
    at a time, in start order: each start minus the moment the key's limit
    allowed it, its due time or the end of the key's run before it if later."""
    delays, previous_end = [], -math.inf
    for due, start, end in sorted(runs, key=lambda run: run[1]):
        delays.append(start - max(due, previous_end))
        previous_end = end
    return delays


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over ``runs``, and its ``_min`` and
    ``_max``; the other values of the first run as they are."""
    found: dict[str, Any] = {"runs": len(runs)}
    for key, first in runs[0].items():
        if isinstance(first, bool) or not isinstance(first, int | float):
            found[key] = first
            continue
        values = [run[key] for run in runs]
        found[key] = statistics.median(values)
        found[f"{key}_min"], found[f"{key}_max"] = min(values), max(values)
    return found


def _percentile(values: Sequence[float], q: float) -> float:
    from benchmarks.harness.stats import percentile

    return percentile(values, q) if values else math.nan


# The runs: real processes, real servers.


def setup(rate: int) -> None:
    """Django with the tasks under limits, and the runs' table."""
    os.environ[ENV] = "1"
    os.environ["DELAYQ_BENCH_RATE"] = str(rate)
    from benchmarks.scenarios.end_to_end import setup as django_setup

    django_setup("postgres")
    from django.db import connection

    from benchmarks.harness.benchapp.limited_tasks import RUNS_TABLE

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {RUNS_TABLE} (key text NOT NULL, "
            "n bigint NOT NULL, started double precision NOT NULL, "
            "ended double precision NOT NULL)"
        )


def _drop_table() -> None:
    """The runs' table goes with the scenario: the scenarios after it in a
    run share the database."""
    from django.db import connection

    from benchmarks.harness.benchapp.limited_tasks import RUNS_TABLE

    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {RUNS_TABLE}")


def _clear(*, redis: bool) -> None:
    """Rows of earlier tasks gone (all finished, when processes run), and
    Redis flushed (``redis``: only with no process running)."""
    from django.db import connection

    from benchmarks.harness.benchapp.limited_tasks import RUNS_TABLE
    from benchmarks.harness.benchapp.models import BenchRow
    from benchmarks.scenarios.end_to_end import bench_client
    from django_delayq.models import DelayedTask

    if redis:
        bench_client().flushall()
    DelayedTask.objects.all().delete()
    BenchRow.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {RUNS_TABLE}")
        cursor.execute("VACUUM ANALYZE django_delayq_delayedtask")


@contextmanager
def processes(workers: int, threads: int, *, limits: bool = True) -> Iterator[None]:
    """Fresh data, then a dispatcher and the workers; ``limits`` False: of a
    project without the tasks under limits (the environment of the other
    scenarios)."""
    from benchmarks.scenarios.end_to_end import running

    _clear(redis=True)
    if not limits:
        os.environ.pop(ENV)  # read by running() as it starts them
    try:
        with running(workers, concurrency=threads):
            yield
    finally:
        os.environ[ENV] = "1"


def _pending() -> int:
    from django_delayq.models import DelayedTask, Status

    return DelayedTask.objects.filter(
        status__in=[Status.SCHEDULED, Status.RUNNING]
    ).count()


def _all_due(func: Any, n: int, args: Callable[[int], list[Any]]) -> float:
    """Schedule ``n`` calls of ``func`` due at one moment a lead ahead
    (bulk scheduling done before it); the epoch seconds of that moment."""
    from django.utils import timezone

    from django_delayq import Call, schedule_many

    first = timezone.now() + datetime.timedelta(seconds=1.0 + n / 5000)
    for start in range(0, n, 5000):
        schedule_many(
            Call(func, args=args(i), eta=first)
            for i in range(start, min(n, start + 5000))
        )
    if timezone.now() > first:
        raise RuntimeError("scheduling took longer than its lead; raise it")
    return first.timestamp()


def _wait_done(time_limit: float, tick: Callable[[], None] | None = None) -> int:
    """Wait (at most ``time_limit`` s) until no task is scheduled or
    running, calling ``tick`` every :data:`SAMPLE_EVERY` s; what is left."""
    deadline = time.monotonic() + time_limit
    checked, pending = 0.0, 1
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if time.monotonic() - checked >= 0.2:
            checked = time.monotonic()
            pending = _pending()
            if not pending:
                return 0
        time.sleep(SAMPLE_EVERY if tick is not None else 0.2)
    return _pending()


def _runs(key: str) -> list[tuple[int, float, float]]:
    """``(n, started, ended)`` of the runs recorded under ``key``."""
    from django.db import connection

    from benchmarks.harness.benchapp.limited_tasks import RUNS_TABLE

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT n, started, ended FROM {RUNS_TABLE} WHERE key = %s", [key]
        )
        return [(int(n), float(s), float(e)) for n, s, e in cursor.fetchall()]


def started_per_s(func: Any, n: int, time_limit: float) -> dict[str, float]:
    """``n`` calls of ``func(i)`` all due at once: tasks / (last finish -
    first start), from the task rows, as ``end_to_end --all-due``; for a
    task under limits, also its admissions per task (more than 1: some were
    admitted again, their slots having lapsed before a worker took them)."""
    from django_delayq.models import DelayedTask, Status

    usage = _Usage(func.queue or "default", func.name) if func.limit_rule else None
    _all_due(func, n, lambda i: [i])
    left = _wait_done(time_limit)
    admissions = usage.now() if usage is not None else None
    rows = list(
        DelayedTask.objects.filter(status=Status.SUCCEEDED).values_list(
            "started_at", "finished_at"
        )
    )
    found = {
        "per_s": 0.0,
        "ran": len(rows),
        "left": left,
        "admitted_per_task": (
            admissions.admitted / n if admissions is not None else math.nan
        ),
    }
    if rows:
        busy = (max(f for _, f in rows) - min(s for s, _ in rows)).total_seconds()
        found["per_s"] = len(rows) / max(busy, 1e-3)
    return found


class _Usage:
    """Samples of one limit class's slots held while tasks wait for it."""

    def __init__(self, queue: str, name: str) -> None:
        from benchmarks.scenarios.end_to_end import bench_client
        from django_delayq.conf import get_settings
        from django_delayq.store.keys import LIMITS_SHARD, shard_keys

        self.client = bench_client()
        self.keys = shard_keys(get_settings().key_prefix, queue, LIMITS_SHARD)
        self.name = f"task:{name}"
        self.held: list[int] = []
        self.last = 0.0

    def now(self) -> Any:
        from django_delayq.store import limits

        return limits.usage(self.client, self.keys).get(self.name)

    def sample(self) -> None:
        if time.monotonic() - self.last < SAMPLE_EVERY:
            return
        self.last = time.monotonic()
        use = self.now()
        if use is not None and use.waiting > 0:
            self.held.append(use.running)


def at_once(limit: int, n: int, time_limit: float) -> dict[str, float]:
    """``n`` tasks under ``concurrency_limit=limit`` due at once."""
    from benchmarks.harness.benchapp.limited_tasks import AT_ONCE, QUEUE

    func = AT_ONCE[limit]
    usage = _Usage(QUEUE, func.name)
    _all_due(func, n, lambda i: [i])
    left = _wait_done(time_limit, usage.sample)
    runs = _runs({1: "one", 5: "five"}[limit])
    spans = [(s, e) for _, s, e in runs] or [(math.nan, math.nan)]
    first = min(s for s, _ in spans)
    last = max(s for s, _ in spans)
    per_s = len(runs) / max(max(e for _, e in spans) - first, 1e-3)
    return {
        "limit": limit,
        "tasks": n,
        "ran": len(runs),
        "ran_twice": len(runs) - len({i for i, _, _ in runs}),
        "left": left,
        "most_at_once": max_overlap(spans),
        "utilisation": utilisation(spans, limit, first, last),
        "slot_utilisation": (
            statistics.mean(usage.held) / limit if usage.held else math.nan
        ),
        "samples": len(usage.held),
        "function_ms": statistics.mean(e - s for s, e in spans) * 1000,
        "started_per_s": per_s,
        # What one slot takes per task: the function and the hand-off to
        # the next (release, admission, read, confirm, claim, commit).
        "cycle_ms": limit / per_s * 1000 if per_s else math.nan,
    }


def rated(rate: int, window: float, workers: int, threads: int) -> dict[str, float]:
    """3 ``rate`` tasks a second of ``rate_limit="<rate>/s"``, due evenly
    over ``window`` seconds; the processes stop just after it."""
    from django.utils import timezone

    from benchmarks.harness.benchapp.limited_tasks import rate_limited
    from django_delayq import Call, schedule_many

    offered = 3 * rate
    n = int(offered * window)
    with processes(workers, threads):
        first = timezone.now() + datetime.timedelta(seconds=1.0 + n / 5000)
        step = datetime.timedelta(seconds=1 / offered)
        for start in range(0, n, 5000):
            schedule_many(
                Call(rate_limited, args=[i], eta=first + step * i)
                for i in range(start, min(n, start + 5000))
            )
        # Bounded: the window, then a second for the last starts' commits.
        pause = (first - timezone.now()).total_seconds() + window + 1.5
        time.sleep(max(0.0, pause))
    runs = _runs("rate")
    starts = sorted(s for _, s, _ in runs)
    counted = [t for t in starts if t < starts[0] + window] if starts else []
    return {
        "rate": rate,
        "offered_per_s": offered,
        "started": len(starts),
        "most_in_a_second": window_max(starts),
        "tightest_ms": tightest_span(starts, rate + 1) * 1000,
        "achieved_per_s": len(counted) / window,
        "achieved_ratio": len(counted) / window / rate,
        "ran_twice": len(runs) - len({i for i, _, _ in runs}),
    }


def _all_waiting(queue: str, deadline: float) -> None:
    """Wait until the limits shard's due-sets are empty: every due task of
    the queue waits in its group's line (or ran)."""
    from benchmarks.scenarios.end_to_end import bench_client
    from django_delayq.conf import get_settings
    from django_delayq.store.keys import LIMITS_SHARD, shard_keys

    client = bench_client()
    keys = shard_keys(get_settings().key_prefix, queue, LIMITS_SHARD)
    while time.monotonic() < deadline:
        if not sum(client.zcard(key) for key in keys.due_bands):
            return
        time.sleep(0.05)
    raise RuntimeError("the dispatcher did not place the backlog in time")


def fairness(
    backlog: int, keyed: int, gap: float, workers: int, threads: int
) -> dict[str, float]:
    """Key A's ``backlog`` waits; key B's ``keyed`` tasks come one at a time."""
    from benchmarks.harness.benchapp.limited_tasks import QUEUE, one_per_tenant
    from django_delayq import schedule

    usage = _Usage(QUEUE, one_per_tenant.name)
    due: dict[int, float] = {}
    with processes(workers, threads):
        first = _all_due(one_per_tenant, backlog, lambda i: ["A", i])
        time.sleep(max(0.0, first - time.time()))
        _all_waiting(QUEUE, time.monotonic() + 60)
        for i in range(keyed):
            due[i] = schedule(one_per_tenant, args=["B", i]).run_at.timestamp()
            time.sleep(gap)  # pacing: B's tasks come one at a time
        deadline = time.monotonic() + 30
        while len(_runs("B")) < keyed and time.monotonic() < deadline:
            time.sleep(0.1)
        use = usage.now()
        a_waiting = use.waiting if use is not None else 0
    b = _runs("B")
    a = _runs("A")
    delays = [d * 1000 for d in allowed_delays([(due[i], s, e) for i, s, e in b])]
    a_spans = [(s, e) for _, s, e in a]
    a_busy = max(e for _, e in a_spans) - min(s for s, _ in a_spans)
    return {
        "backlog": backlog,
        "keyed": keyed,
        "b_ran": len(b),
        "b_p50_ms": _percentile(delays, 0.50),
        "b_p99_ms": _percentile(delays, 0.99),
        "b_max_ms": max(delays, default=math.nan),
        "a_waiting_after": a_waiting,
        "a_per_s": len(a) / max(a_busy, 1e-3),
        "most_at_once_a": max_overlap(a_spans),
        "most_at_once_b": max_overlap([(s, e) for _, s, e in b]),
    }


def _load() -> float:
    from benchmarks.scenarios.end_to_end import _load as load

    return load()


def _shared(
    steps: Sequence[Callable[[], dict[str, Any]]], workers: int, threads: int
) -> list[dict[str, Any]]:
    """Run ``steps`` one after the other on the same processes, the rows of
    the step before cleared; a step that left tasks unfinished hands the
    next fresh processes and data."""
    found: list[dict[str, Any]] = []
    todo = list(steps)
    while todo:
        with processes(workers, threads):
            while todo:
                found.append(todo.pop(0)())
                if found[-1]["left"]:
                    break
                if todo:
                    _clear(redis=False)
    return found


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """Every part once: the baseline of the cost on processes without
    limits, then the parts that drain on shared processes, then fairness
    and the rate on fresh processes each (they leave tasks waiting)."""
    from benchmarks.harness.benchapp.limited_tasks import wide_open
    from benchmarks.harness.benchapp.tasks import write_row

    n, workers, threads = args.tasks, args.workers, args.threads
    # Room for 50 tasks/s under a limit of one before a part gives up.
    time_limit = 30 + n / 50
    load = _load()
    found: dict[str, Any] = {}
    steps: list[Callable[[], dict[str, Any]]] = []
    if "cost" in args.parts:
        with processes(workers, threads, limits=False):
            baseline = started_per_s(write_row, n, time_limit)
        steps += [
            lambda: started_per_s(write_row, n, time_limit),
            lambda: started_per_s(wide_open, n, time_limit),
        ]
    if "concurrency" in args.parts:
        steps += [lambda: at_once(1, n, time_limit), lambda: at_once(5, n, time_limit)]
    shared = _shared(steps, workers, threads)
    if "cost" in args.parts:
        unlimited, limited = shared[:2]
        found["cost"] = {
            "tasks": n,
            "baseline_per_s": baseline["per_s"],
            "unlimited_per_s": unlimited["per_s"],
            "wide_open_per_s": limited["per_s"],
            "unlimited_ratio": unlimited["per_s"] / baseline["per_s"],
            "wide_open_ratio": limited["per_s"] / unlimited["per_s"],
            "wide_open_vs_baseline": limited["per_s"] / baseline["per_s"],
            "left_baseline": baseline["left"],
            "left_unlimited": unlimited["left"],
            "left_wide_open": limited["left"],
            "wide_open_admitted_per_task": limited["admitted_per_task"],
        }
        shared = shared[2:]
    if shared:
        found["at_once"] = shared
    if "fairness" in args.parts:
        found["fairness"] = fairness(
            args.fair_backlog, args.fair_keyed, args.fair_gap, workers, threads
        )
    if "rate" in args.parts:
        found["rate"] = rated(args.rate, args.rate_window, workers, threads)
    found["load"] = {"before": load, "after": _load()}
    return found


def text(results: dict[str, Any]) -> list[str]:
    """The figures in a few lines (medians; the worst run for the limits)."""
    lines = []
    if "cost" in results:
        c = results["cost"]
        lines.append(
            f"cost, {c['tasks']:,.0f} tasks: no limits anywhere "
            f"{c['baseline_per_s']:,.0f} started/s; unlimited beside limits "
            f"{c['unlimited_per_s']:,.0f}/s ({c['unlimited_ratio']:.2f}x); under "
            f"limits that never bind {c['wide_open_per_s']:,.0f}/s "
            f"({c['wide_open_ratio']:.2f}x the unlimited)"
        )
    for row in results.get("at_once", []):
        lines.append(
            f"concurrency_limit={row['limit']:.0f}: {row['ran']:,.0f} of "
            f"{row['tasks']:,.0f} ran, at most {row['most_at_once_max']:.0f} at "
            f"once; utilisation {row['utilisation']:.2f} (slots held "
            f"{row['slot_utilisation']:.2f}); {row['started_per_s']:,.0f} "
            f"started/s, {row['function_ms']:.1f} ms a function, "
            f"{row['cycle_ms']:.1f} ms a slot's cycle"
        )
    if "rate" in results:
        r = results["rate"]
        lines.append(
            f"rate_limit={r['rate']:.0f}/s offered {r['offered_per_s']:.0f}/s: at "
            f"most {r['most_in_a_second_max']:.0f} starts in any second, "
            f"{r['rate'] + 1:.0f} starts within {r['tightest_ms_min']:,.0f} ms at "
            f"the tightest; {r['achieved_per_s']:.1f} started/s "
            f"({r['achieved_ratio']:.2f} R)"
        )
    if "fairness" in results:
        f = results["fairness"]
        lines.append(
            f"fairness: key B started {f['b_p50_ms']:.1f} ms (p50), "
            f"{f['b_p99_ms']:.1f} ms (p99) after its limit allowed it, with "
            f"{f['backlog']:,.0f} of key A due; A ran {f['a_per_s']:,.0f}/s, "
            f"{f['a_waiting_after']:,.0f} still waiting"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000, help="per part")
    parser.add_argument("--rate", type=int, default=50, help="R, starts/s")
    parser.add_argument("--rate-window", type=float, default=60.0, help="seconds")
    parser.add_argument("--fair-backlog", type=int, default=20_000, help="key A")
    parser.add_argument("--fair-keyed", type=int, default=20, help="key B")
    parser.add_argument("--fair-gap", type=float, default=0.25, help="seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--parts",
        default="cost,concurrency,fairness,rate",
        help="comma-separated, of: cost, concurrency, fairness, rate",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 run, 500 tasks, a 10 s rate window, a backlog of 2,000",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.tasks, args.rate_window, args.fair_backlog = 1, 500, 10.0, 2000
    args.parts = set(args.parts.split(","))
    setup(args.rate)
    try:
        runs = [one_run(args) for _ in range(args.runs)]
    finally:
        _drop_table()
    results: dict[str, Any] = {
        "runs": args.runs,
        "workers": args.workers,
        "threads": args.threads,
        "tasks": args.tasks,
        "rate_window_s": args.rate_window,
        "fair_gap_s": args.fair_gap,
        "load": summary([run["load"] for run in runs]),
    }
    for part in ("cost", "fairness", "rate"):
        if part in runs[0]:
            results[part] = summary([run[part] for run in runs])
    if "at_once" in runs[0]:
        results["at_once"] = [
            summary([run["at_once"][i] for run in runs])
            for i in range(len(runs[0]["at_once"]))
        ]
    print(json.dumps(results) if args.json else "\n".join(text(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
