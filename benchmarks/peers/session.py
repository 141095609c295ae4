"""One peer's run: its worker processes, and each measurement on them.

The runner (:mod:`benchmarks.peers.runner`) decides the order; everything
here is bounded in count and time, and raises :class:`PeerFailure` with the
workers' log tails when a step cannot be done.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.peers.base import BROKER_URL_ENV, TUNED_ENV, Peer
from benchmarks.peers.procs import Proc, stop_all
from benchmarks.peers.recorder import RECORDER_URL_ENV, Recorder
from benchmarks.peers.stats import completed_per_s, dedupe, summarise
from benchmarks.peers.stores import Store
from benchmarks.peers.task import ROW_URL_ENV

# Far enough that nothing fires during a run, and under Celery's Redis
# visibility_timeout (1 h), past which it would redeliver the task.
FAR_FUTURE_S = 1800.0
READY_TIMEOUT_S = 60.0
SETTLE_S = 2.0


class PeerFailure(Exception):
    """A step of the run could not be done; the message says why."""


class Run:
    """The state of one run_peer call: store, peer client, workers."""

    def __init__(
        self,
        peer: Peer,
        measured: Store,
        recorder: Recorder,
        workers: int,
        time_limit_s: float,
        log_dir: Path,
        errors: list[str],
        row_url: str | None = None,
    ) -> None:
        self.peer = peer
        #: the database the task writes its row to (None: no row)
        self.row_url = row_url
        self.measured = measured
        self.recorder = recorder
        self.workers = workers
        self.time_limit_s = time_limit_s
        self.log_dir = log_dir
        self.errors = errors
        self.procs: list[Proc] = []
        self._warmups = 0

    # -- workers ----------------------------------------------------------

    def start_workers(self) -> None:
        env = {
            BROKER_URL_ENV: self.peer.broker_url,
            RECORDER_URL_ENV: self.recorder.url,
            TUNED_ENV: "1" if self.peer.tuned else "0",
            **({ROW_URL_ENV: self.row_url} if self.row_url else {}),
            **self.peer.worker_env(),
        }
        for label, argv in self.peer.worker_commands(self.workers):
            log = self.log_dir / f"{label.replace(' ', '-')}.log"
            self.procs.append(Proc(label, argv, env, log))
        self._wait_ready()

    def _wait_ready(self) -> None:
        """One task through the whole path; then give the other workers a
        moment, as one ready worker says little about the rest."""
        self._warmups += 1
        tag = f"warmup-{self._warmups}"
        self.peer.schedule(tag, 0, time.time() + 0.2)
        deadline = time.time() + max(READY_TIMEOUT_S, self.time_limit_s)
        while self.recorder.count(tag) < 1:
            self.check_alive()
            if time.time() > deadline:
                raise PeerFailure(
                    f"workers not ready: a task due in 0.2 s had not run after "
                    f"{READY_TIMEOUT_S:g} s{self._log_tails()}"
                )
            time.sleep(0.05)
        time.sleep(1.0)

    def check_alive(self) -> None:
        dead = [p for p in self.procs if not p.alive()]
        if dead:
            raise PeerFailure(
                "worker process exited: "
                + ", ".join(f"{p.label} (code {p.popen.returncode})" for p in dead)
                + self._log_tails()
            )

    def _log_tails(self) -> str:
        return "".join(
            f"\n--- {p.label} log ({p.log_path}):\n{p.log_tail()}" for p in self.procs
        )

    def stop_workers(self) -> None:
        stop_all(self.procs)
        self.procs = []

    def restart_clean(self) -> None:
        """Fresh workers on an empty store: nothing left from before."""
        self.stop_workers()
        self.measured.flush()
        self.start_workers()

    # -- measurements -----------------------------------------------------

    def schedule_rate(self, n: int) -> float:
        """Single calls per second, from one client, no worker running."""
        self.measured.flush()
        due = time.time() + FAR_FUTURE_S
        self.peer.schedule("throughput", -1, due)  # connect, declare queues
        started = time.perf_counter()
        for index in range(n):
            self.peer.schedule("throughput", index, due)
        rate = n / (time.perf_counter() - started)
        self.measured.flush()
        return round(rate, 1)

    def bulk_rate(self, n: int) -> float | None:
        if not self.peer.bulk_batch:
            return None
        self.measured.flush()
        due = time.time() + FAR_FUTURE_S
        self.peer.bulk_schedule("throughput", [(-1, due)])
        batch = self.peer.bulk_batch
        started = time.perf_counter()
        for first in range(0, n, batch):
            items = [(i, due) for i in range(first, min(n, first + batch))]
            self.peer.bulk_schedule("throughput", items)
        rate = n / (time.perf_counter() - started)
        self.measured.flush()
        return round(rate, 1)

    def idle_commands(self, seconds: float) -> float:
        """Commands (Redis) or transactions (PostgreSQL) per second the peer
        sends with nothing due."""
        time.sleep(min(SETTLE_S, seconds))
        self.check_alive()
        before = self.measured.operations()
        time.sleep(seconds)
        after = self.measured.operations()
        # Of ours, the first reading is counted in the second one's figure.
        return round((after - before - 1) / seconds, 2)

    def paced(
        self, tag: str, rate: float, seconds: float, delay_s: float
    ) -> dict[str, Any]:
        """``rate`` tasks/s for ``seconds``, each due ``delay_s`` after its call."""
        n = max(1, round(rate * seconds))
        started = time.time() + 0.05
        last_due = 0.0
        for index in range(n):
            pause = started + index / rate - time.time()
            if pause > 0:
                time.sleep(pause)
            last_due = time.time() + delay_s
            self.peer.schedule(tag, index, last_due)
        took = time.time() - started
        if n > 1 and (n - 1) / took < 0.9 * rate:
            self.errors.append(
                f"{tag}: the client scheduled only {(n - 1) / took:,.0f} tasks/s "
                f"of the {rate:,.0f}/s asked"
            )
        return self._collect(tag, n, last_due + self.time_limit_s)

    def burst(
        self, tag: str, n: int, window_s: float, est_rate: float
    ) -> dict[str, Any]:
        """``n`` tasks due evenly over ``window_s``, all scheduled beforehand."""
        # Scheduling runs while the workers take in what is scheduled, so
        # allow for a third of the rate measured with no worker, and a margin.
        lead = 3.0 * n / max(est_rate, 100.0) + 2.0
        first_due = time.time() + lead
        for index in range(n):
            self.peer.schedule(tag, index, first_due + window_s * index / n)
        overran = time.time() - first_due
        if overran > 0:
            self.errors.append(
                f"{tag}: scheduling finished {overran:.2f} s after the first "
                "task was due (lead too short for this machine)"
            )
        result = self._collect(tag, n, first_due + window_s + self.time_limit_s)
        samples, _ = dedupe(self.recorder.samples(tag))
        result["completed_per_s"] = completed_per_s(samples, first_due)
        return result

    def _collect(self, tag: str, n: int, deadline: float) -> dict[str, Any]:
        while True:
            count = self.recorder.wait(tag, n, deadline)
            samples, repeats = dedupe(self.recorder.samples(tag))
            if len(samples) >= n or time.time() >= deadline:
                break
            self.check_alive()
            # Repeats made the count reach n early: wait for one more.
            self.recorder.wait(tag, count + 1, deadline)
        if repeats:
            self.errors.append(f"{tag}: {repeats} tasks ran more than once")
        # Peers that keep due times in whole milliseconds may start a task
        # within 1 ms before it, which is their resolution, not earliness.
        early = [s.lateness_ms for s in samples if s.lateness_ms < -1.0]
        if early:
            self.errors.append(
                f"{tag}: {len(early)} of {len(samples)} tasks started more than "
                f"1 ms before their due time (earliest by {-min(early):,.0f} ms)"
            )
        if len(samples) < n:
            self.errors.append(
                f"{tag}: {len(samples)} of {n} fired within "
                f"{self.time_limit_s:g} s of the last due time"
            )
        return summarise(n, samples)

    def memory_per_task(self, n: int) -> float:
        before = self._settled_memory()
        due = time.time() + FAR_FUTURE_S
        for index in range(n):
            self.peer.schedule("memory", index, due)
        after = self._settled_memory()
        return round((after - before) / n, 1)

    def _settled_memory(self) -> int:
        """The store's used bytes once they have held still for two seconds
        running (workers may still be moving what was just scheduled)."""
        deadline = time.monotonic() + max(READY_TIMEOUT_S, self.time_limit_s)
        readings = [self.measured.used_bytes()]
        while True:
            time.sleep(1.0)
            readings.append(self.measured.used_bytes())
            last = readings[-3:]
            if len(last) == 3 and max(last) - min(last) <= max(
                32 * 1024, last[-1] // 1000
            ):
                return last[-1]
            if time.monotonic() > deadline:
                self.errors.append("memory: used bytes still moving; last reading used")
                return last[-1]
