"""The direct-call baseline: the end-to-end task functions, with no queue at all.

What a task costs when a plain loop in one process calls its function, on the
same database, committing every ``--batch`` calls (``transaction.atomic()``
around each batch). The end-to-end throughput scenarios run the very same
functions (``benchmarks.harness.benchapp.tasks``) through ``delayq_dispatch`` and a
``delayq_worker``; the ratio of the two says what the queue costs per task.

    python -m tools.servers run --postgres -- \\
        python -m benchmarks.scenarios.direct_call --db postgres --calls 20000

Prints one JSON object (``--json``) or a line per task kind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchmarks.scenarios.end_to_end import setup


def calls_per_s(kind: str, calls: int, batch: int) -> float:
    """Call ``kind``'s function ``calls`` times, ``batch`` per transaction."""
    from django.db import transaction

    from benchmarks.harness.benchapp.models import BenchRow
    from benchmarks.harness.benchapp.tasks import KINDS

    # The function itself: Task.__call__ only forwards to it.
    func = KINDS[kind].func
    BenchRow.objects.all().delete()
    started = time.perf_counter()
    for first in range(0, calls, batch):
        with transaction.atomic():
            for n in range(first, min(calls, first + batch)):
                func(n)
    took = time.perf_counter() - started
    BenchRow.objects.all().delete()
    return calls / took


def measure(calls: int, batch: int, repeats: int) -> dict[str, float]:
    """Median calls/s of each task kind over ``repeats`` rounds, interleaved."""
    from benchmarks.harness.benchapp.tasks import KINDS

    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    calls_per_s(next(iter(KINDS)), min(calls, 100), batch)  # connect, warm up
    for _ in range(repeats):
        for kind in KINDS:
            rates[kind].append(calls_per_s(kind, calls, batch))
    result: dict[str, float] = {
        f"{k}_calls_per_s": statistics.median(v) for k, v in rates.items()
    }
    result["calls"] = calls
    result["batch"] = batch
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", choices=["sqlite", "postgres", "mariadb"], default="postgres"
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="calls per commit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    result = measure(args.calls, args.batch, args.repeats)
    if args.json:
        print(json.dumps(result))
    else:
        print(", ".join(f"{k}={v:,.1f}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
