"""``run_peer``: one peer, on a fresh store, every measurement.

The store is a fresh redis-server, or for the peers that keep their tasks in
PostgreSQL a fresh database on the server given (or one started here); the
tasks report to a redis-server of their own either way (the recorder).

Order of a run, each step bounded in count and time:

1. schedule throughput, single calls then the bulk API, with no worker
   running (the client's cost alone), tasks due far in the future; then
   the store is emptied (FLUSHALL, or TRUNCATE of the peer's tables);
2. workers start, and one task through the whole path proves them ready;
3. idle cost: INFO ``total_commands_processed`` (PostgreSQL: transactions
   in ``pg_stat_database``) over ``idle_seconds``;
4. light, steady and burst lateness, each under its own recorder key, so a
   straggler from one scenario never lands in the next; a scenario that
   left tasks unfired is followed by a restart on a flushed Redis;
5. memory: restart on an empty store, then ``used_memory`` (PostgreSQL: the
   peer's tables with indexes and TOAST) before and after ``memory_n`` tasks
   due far in the future, once the peer has settled them where they wait
   (its workers running, as in production).

A failure becomes a line in ``errors`` and None values, never an exception.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.peers import PEERS
from benchmarks.peers.base import Peer
from benchmarks.peers.recorder import Recorder
from benchmarks.peers.session import Run
from benchmarks.peers.stats import empty_result
from benchmarks.peers.stores import (
    PostgresStore,
    RedisStore,
    Store,
    create_database,
    drop_database,
)
from benchmarks.peers.task import ROW_TABLE_SQL
from tools.servers import PostgresServer, RedisServer

logger = logging.getLogger(__name__)

_PEER_CLASSES = {
    "celery": "benchmarks.peers.celery_peer:CeleryPeer",
    "rq": "benchmarks.peers.rq_peer:RQPeer",
    "dramatiq": "benchmarks.peers.dramatiq_peer:DramatiqPeer",
    "huey": "benchmarks.peers.huey_peer:HueyPeer",
    "procrastinate": "benchmarks.peers.procrastinate_peer:ProcrastinatePeer",
    "pgqueuer": "benchmarks.peers.pgqueuer_peer:PgQueuerPeer",
    "django-tasks-db": "benchmarks.peers.tasks_db_peer:TasksDBPeer",
}


def load_peer(name: str) -> type[Peer]:
    if name not in _PEER_CLASSES:
        raise ValueError(f"unknown peer {name!r}: choose from {', '.join(PEERS)}")
    module_name, class_name = _PEER_CLASSES[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"{exc}: install the bench dependency group "
            "(uv pip install --group bench) to measure the peers"
        ) from exc
    peer_class: type[Peer] = getattr(module, class_name)
    return peer_class


@contextlib.contextmanager
def redis_binary(env: Mapping[str, str] | str | None) -> Iterator[None]:
    """Make tools.servers find the wanted redis-server while servers start.

    ``env`` is either environment variables to apply (``{"PATH": ...}``) or
    the path of a ``redis-server`` binary, whose directory goes first on PATH.
    """
    if env is None:
        yield
        return
    if isinstance(env, str):
        binary = Path(env)
        if binary.name != "redis-server" or not os.access(binary, os.X_OK):
            raise ValueError(
                f"redis_binary_env={env!r}: give the path of an executable "
                "named redis-server, or a mapping such as {'PATH': ...}"
            )
        env = {"PATH": os.pathsep.join([str(binary.parent), os.environ["PATH"]])}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass(frozen=True)
class Options:
    """What run_peer was asked to measure (see its docstring)."""

    n_schedule: int
    light: tuple[float, float]
    steady: tuple[float, float]
    burst_n: int
    burst_window_s: float
    workers: int
    idle_seconds: float
    memory_n: int
    tuned: bool
    time_limit_s: float
    delay_s: float


def _attempt(errors: list[str], label: str, fn: Callable[[], Any], default: Any) -> Any:
    started = time.monotonic()
    try:
        return fn()
    except Exception as exc:
        logger.exception("%s failed", label)
        errors.append(f"{label}: {type(exc).__name__}: {exc}")
        return default
    finally:
        logger.info("%s took %.1f s", label, time.monotonic() - started)


def _step(errors: list[str], label: str, fn: Callable[[], None]) -> bool:
    """Run a step that returns nothing; False (and a line in errors) if it failed."""

    def done() -> bool:
        fn()
        return True

    return bool(_attempt(errors, label, done, False))


def run_peer(
    name: str,
    *,
    redis_binary_env: Mapping[str, str] | str | None = None,
    n_schedule: int,
    light: tuple[float, float],
    steady: tuple[float, float],
    burst_n: int,
    burst_window_s: float,
    workers: int,
    idle_seconds: float,
    memory_n: int,
    tuned: bool,
    time_limit_s: float,
    delay_s: float = 2.0,
    log_dir: Path | None = None,
    postgres_url: str | None = None,
) -> dict[str, Any]:
    """Measure one peer; return a JSON-serialisable dict (see the package doc).

    ``light`` and ``steady`` are (tasks per second, seconds); each task is
    due ``delay_s`` after its call. ``time_limit_s`` bounds each wait for
    tasks to fire, counted from the last due time. ``redis_binary_env``
    picks the redis-server: environment variables to start it under (such
    as ``{"PATH": ...}``) or the path of the binary. Worker logs go to
    ``log_dir`` (a temporary directory, removed afterwards, if None).
    A PostgreSQL peer gets a fresh database on the server whose (superuser)
    ``postgres_url`` is given, or on a private server started for the run.
    """
    opts = Options(
        n_schedule=n_schedule, light=light, steady=steady, burst_n=burst_n,
        burst_window_s=burst_window_s, workers=workers,
        idle_seconds=idle_seconds, memory_n=memory_n, tuned=tuned,
        time_limit_s=time_limit_s, delay_s=delay_s,
    )  # fmt: skip
    errors: list[str] = []
    result = empty_result(name, light, steady, burst_n, errors)
    try:
        _run(result, name, redis_binary_env, log_dir, postgres_url, opts)
    except Exception as exc:
        logger.exception("%s run failed", name)
        errors.append(f"{type(exc).__name__}: {exc}")
    return result


def _run(
    result: dict[str, Any],
    name: str,
    redis_binary_env: Mapping[str, str] | str | None,
    log_dir: Path | None,
    postgres_url: str | None,
    opts: Options,
) -> None:
    errors: list[str] = result["errors"]
    peer_class = load_peer(name)
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix=f"delayq-peer-{name}-"))
            stack.callback(shutil.rmtree, log_dir, ignore_errors=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        measured = _store(stack, peer_class, opts, redis_binary_env, postgres_url)
        row_url = _rows_database(stack, peer_class, opts, postgres_url)
        with redis_binary(redis_binary_env):
            recorder_server = stack.enter_context(RedisServer())
        recorder = Recorder(recorder_server.url)
        stack.callback(recorder.close)
        peer = peer_class(measured.url, tuned=opts.tuned)
        stack.callback(peer.close)
        run = Run(
            peer,
            measured,
            recorder,
            opts.workers,
            opts.time_limit_s,
            log_dir,
            errors,
            row_url=row_url,
        )
        stack.callback(run.stop_workers)
        mode = "tuned" if opts.tuned else "defaults"
        result["store"] = measured.kind
        result["version"] = f"{peer.version()}; {measured.version()}"
        result["config"] = f"{mode}: {peer.config(opts.workers)}"
        if peer.bulk_batch:
            result["config"] += f"; bulk = {peer.bulk_label}"
        result["config"] += "; the task writes one row"
        logger.info("%s %s: %s", name, mode, result["config"])

        result["schedule_per_s"] = _attempt(
            errors, "schedule", lambda: run.schedule_rate(opts.n_schedule), None
        )
        result["bulk_schedule_per_s"] = _attempt(
            errors, "bulk schedule", lambda: run.bulk_rate(opts.n_schedule), None
        )
        if not _step(errors, "start workers", run.start_workers):
            return
        result["idle_cmds_per_s"] = _attempt(
            errors, "idle", lambda: run.idle_commands(opts.idle_seconds), None
        )
        est_rate = result["schedule_per_s"] or 1000.0
        scenarios: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("light", lambda: run.paced("light", *opts.light, opts.delay_s)),
            ("steady", lambda: run.paced("steady", *opts.steady, opts.delay_s)),
            (
                "burst",
                lambda: run.burst("burst", opts.burst_n, opts.burst_window_s, est_rate),
            ),
        ]
        for label, scenario in scenarios:
            summary = _attempt(errors, label, scenario, None)
            if summary is not None:
                result[label] = summary
            logger.info("%s %s %s: %s", name, mode, label, result[label])
            if label == scenarios[-1][0]:
                break  # the memory step restarts on a flushed Redis anyway
            if summary is None or summary["fired"] < summary["n"]:
                # Leftovers would compete with the next scenario.
                if not _step(errors, f"restart after {label}", run.restart_clean):
                    return
            else:
                time.sleep(1.0)  # let the last acknowledgements land
        result["rows_written"] = _rows_written(row_url)
        if _step(errors, "restart before memory", run.restart_clean):
            result[_BYTES_KEY[measured.kind]] = _attempt(
                errors, "memory", lambda: run.memory_per_task(opts.memory_n), None
            )


_BYTES_KEY = {"redis": "redis_bytes_per_task", "postgres": "db_bytes_per_task"}


def _rows_database(
    stack: contextlib.ExitStack,
    peer_class: type[Peer],
    opts: Options,
    postgres_url: str | None,
) -> str:
    """A fresh database with the ``bench_row`` table the task writes to, on
    the given PostgreSQL, or on a private one (a run without
    ``postgres_url`` then starts one more server)."""
    import psycopg

    if postgres_url is None:
        postgres_url = stack.enter_context(PostgresServer()).url
    name = f"rows_{peer_class.name}_{'tuned' if opts.tuned else 'defaults'}"
    name = name.replace("-", "_")
    stack.callback(drop_database, postgres_url, name)
    url = create_database(postgres_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ROW_TABLE_SQL)
    return url


def _rows_written(url: str) -> int:
    """The rows the tasks wrote so far: each task that started wrote one,
    which a reader of the JSON can check against the started counts."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM bench_row").fetchone()
    return int(row[0]) if row else 0


def _store(
    stack: contextlib.ExitStack,
    peer_class: type[Peer],
    opts: Options,
    redis_binary_env: Mapping[str, str] | str | None,
    postgres_url: str | None,
) -> Store:
    """The measured store of the run: a fresh redis-server, or a fresh
    database (on the given PostgreSQL, or a private one), closed on exit."""
    store: Store
    if peer_class.store == "redis":
        with redis_binary(redis_binary_env):
            server = stack.enter_context(RedisServer())
        store = RedisStore(server.url)
    else:
        if postgres_url is None:
            postgres_url = stack.enter_context(PostgresServer()).url
        # One database per peer and mode: nothing left over from another run.
        name = f"peer_{peer_class.name}_{'tuned' if opts.tuned else 'defaults'}"
        name = name.replace("-", "_")
        admin_url = postgres_url
        stack.callback(drop_database, admin_url, name)
        store = PostgresStore(create_database(admin_url, name), peer_class.tables)
    stack.callback(store.close)
    return store
