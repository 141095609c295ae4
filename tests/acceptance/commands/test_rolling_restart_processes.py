"""A rolling restart where every worker is PID 1 (the first process of its
container): the worker that stops ends its own idle reads at once, and
leaves the blocked reads of the workers that stay alone, although their
PIDs, and so the PIDs in their connections' names, are the same."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from django_delayq.worker.loop import READ_BLOCK_MS
from tests.acceptance.processes import (
    Processes,
    namespaced_pid,
    pid_namespaces_usable,
)
from tools.procs import NotReached, wait_for
from tools.servers import RedisServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        not pid_namespaces_usable(),
        reason="needs `unshare --pid --fork` (util-linux, as root)",
    ),
]


@dataclass(frozen=True)
class Command:
    """One command as ``MONITOR`` showed it."""

    at: float  # the server's clock, seconds
    words: tuple[str, ...]


class Monitor:
    """Every command the server runs, as ``MONITOR`` shows it, collected by
    a thread of its own."""

    def __init__(self, server: RedisServer) -> None:
        # No read timeout (redis-py's default is 5 s): the server is silent
        # until a worker connects, which may take longer on a busy machine.
        self._client = redis.Redis(port=server.port, socket_timeout=None)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self._lock = threading.Lock()
        self.commands: list[Command] = []
        self.ended_by: BaseException | None = None
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        try:
            while True:
                seen = self._monitor.next_command()
                command = Command(seen["time"], tuple(str(seen["command"]).split()))
                with self._lock:
                    self.commands.append(command)
        except (redis.RedisError, OSError, ValueError, AttributeError) as exc:
            # Closed at the end of the test, or a line the client could not
            # parse: kept, so that a wait for commands says why none came.
            self.ended_by = exc

    def of(self, consumer: str) -> list[Command]:
        """The commands that name ``consumer`` (its reads, blocking or not)."""
        with self._lock:
            return [c for c in self.commands if consumer in c.words]

    def consumers(self) -> list[str]:
        """The consumers that sent a blocking read, in order of their first."""
        names: list[str] = []
        with self._lock:
            for command in self.commands:
                if _blocking(command) and command.words[3] not in names:
                    names.append(command.words[3])
        return names

    def wait_for_consumers(
        self, count: int, processes: Processes, *workers: subprocess.Popen[str]
    ) -> None:
        """Wait for ``count`` consumers' blocking reads; on a timeout, say
        what the workers logged and whether this monitor still listens."""
        try:
            wait_for(lambda: len(self.consumers()) >= count, 60, f"{count} blocked")
        except NotReached as exc:
            logs = "\n".join(
                f"--- worker (exit {w.poll()}):\n{processes.log(w)}" for w in workers
            )
            raise AssertionError(
                f"{exc}; consumers {self.consumers()}, {len(self.commands)} "
                f"commands seen, monitor ended by {self.ended_by!r}\n{logs}"
            ) from exc

    def close(self) -> None:
        self._monitor.connection.disconnect()
        self._client.close()
        self._thread.join(timeout=5)


def _blocking(command: Command) -> bool:
    """An ``XREADGROUP GROUP <group> <consumer> ... BLOCK <ms> ...``."""
    return command.words[:1] == ("XREADGROUP",) and "BLOCK" in command.words


def server_time(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


@pytest.fixture
def monitor(redis_server: RedisServer) -> Iterator[Monitor]:
    watching = Monitor(redis_server)
    try:
        yield watching
    finally:
        watching.close()


def test_a_stopping_worker_leaves_alone_the_blocked_read_of_a_worker_with_its_pid(
    processes: Processes, monitor: Monitor, redis_client: redis.Redis
) -> None:
    staying = processes.start_as_pid_one("delayq_worker", "--concurrency", "1")
    monitor.wait_for_consumers(1, processes, staying)
    stopping = processes.start_as_pid_one("delayq_worker", "--concurrency", "1")
    monitor.wait_for_consumers(2, processes, staying, stopping)
    stays, stops = monitor.consumers()
    # Both are PID 1 (consumers are <host>:<pid>:<random>-<thread>): the PID
    # in their connections' names tells them apart no more than in a
    # Kubernetes Deployment.
    assert stays.split(":")[1] == stops.split(":")[1] == "1", (stays, stops)

    # A fresh blocking read of the staying worker, begun after the other
    # one blocked too; the other stops while it waits.
    before = len(monitor.of(stays))
    wait_for(
        lambda: any(_blocking(c) for c in monitor.of(stays)[before:]),
        READ_BLOCK_MS / 1000 + 5,
        "the staying worker's next blocking read",
    )
    read = next(c for c in monitor.of(stays)[before:] if _blocking(c))
    # PID 1 of its namespace ignores signals it has no handler for; the
    # worker has one for SIGTERM.
    os.kill(namespaced_pid(stopping), signal.SIGTERM)
    # An idle worker exits at once, well before its 5-second read ends.
    assert stopping.wait(timeout=READ_BLOCK_MS / 1000 - 1) == 0
    stopped_at = server_time(redis_client)
    assert stopped_at < read.at + READ_BLOCK_MS / 1000 - 0.5, (
        "the stop did not fall inside the staying worker's read"
    )
    log = processes.log(stopping)
    assert "Traceback" not in log, log
    assert "WARNING" not in log, log
    assert "ERROR" not in log, log

    # The staying worker's read went on to its own timeout: the next
    # command that names its consumer comes when Redis timed the read out
    # (never early), not when the other worker stopped.
    def next_command() -> Command | None:
        seen = monitor.of(stays)
        later = seen[seen.index(read) + 1 :]
        return later[0] if later else None

    wait_for(next_command, READ_BLOCK_MS / 1000 + 5, "the staying worker's next")
    after = next_command()
    assert after is not None
    assert after.at - read.at >= READ_BLOCK_MS / 1000, (
        f"the staying worker's read was ended {after.at - read.at:.3f} s after "
        f"it began, by the other worker's stop (which had exited "
        f"{stopped_at - read.at:.3f} s after it began); next: "
        f"{' '.join(after.words[:4])}"
    )
    assert staying.poll() is None
    # PID 1's own stop, as for the other one (unshare passes no signal on).
    os.kill(namespaced_pid(staying), signal.SIGTERM)
    assert staying.wait(timeout=30) == 0


def test_a_worker_that_is_pid_one_exits_at_once_when_idle(
    processes: Processes, monitor: Monitor
) -> None:
    worker = processes.start_as_pid_one("delayq_worker", "--concurrency", "3")
    monitor.wait_for_consumers(3, processes, worker)
    os.kill(namespaced_pid(worker), signal.SIGTERM)
    try:
        assert worker.wait(timeout=READ_BLOCK_MS / 1000 - 1) == 0
    except subprocess.TimeoutExpired:
        pytest.fail("the idle worker waited for its reads to time out")
    log = processes.log(worker)
    assert "WARNING" not in log, log
    assert "ERROR" not in log, log
