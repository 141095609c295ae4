"""A deploy, with real processes: the previous release runs, the current one
migrates under it, starts beside it and takes over (docs/guide/upgrading.md).

The previous release is the commit pinned in :data:`PREVIOUS`, extracted from
the repository (a shallow clone without it fails the test, saying so). Both
releases run the same project (``project/``: one task that notes each of its
runs, and a producer command) with ``PYTHONPATH`` on their own source tree,
against one database and one Redis:

1. the previous release migrates a new database and runs a dispatcher, two
   workers, a sweeper and a producer scheduling plain tasks, with a backlog
   due over the whole test;
2. the current release runs ``migrate`` while they run; the previous
   producer's ``schedule()`` calls go on working;
3. the current release starts a dispatcher, a worker, a sweeper and a
   producer scheduling tasks of every priority band, which the previous
   dispatcher and workers see too;
4. the previous release's processes get SIGTERM; the current producer goes
   on a little, then stops, and the queue drains.

Every committed task runs exactly once, none before its ``run_at``, none is
dead-lettered or failed, and no ``schedule()`` of either producer failed.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings

from tests.upgrade import SUMMARY
from tools.procs import ROOT, Process, log_tail, stop_together, wait_for
from tools.servers import MariaDBServer, PostgresServer, RedisServer

#: The previous release: the last commit before migration 0004, whose
#: processes know no priorities, and index and read only the normal band.
PREVIOUS = "c375eff"
PROJECT = Path(__file__).parent / "project"
QUEUE = "upgrade"
SHARDS = 2

pytestmark = pytest.mark.timeout(300)


def extract(commit: str, into: Path) -> Path:
    """The source tree of ``commit``, from the repository."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        pytest.fail(
            f"the previous release, commit {commit}, is not in the repository "
            f"at {ROOT} ({found.stderr.strip()}): the upgrade test needs the "
            f"full history (git fetch --unshallow)",
            pytrace=False,
        )
    into.mkdir()
    archive = subprocess.Popen(
        ["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0, f"git archive {commit} failed"
    return into


class Database:
    """The test's own database, read with the driver itself: the project's
    processes own its schema. SQL written here quotes identifiers the
    standard way (``"key"``): MariaDB reads it in ``ANSI_QUOTES`` mode."""

    def __init__(
        self,
        tmp: Path,
        postgres: PostgresServer | None,
        mariadb: MariaDBServer | None = None,
    ) -> None:
        self.postgres, self.mariadb = postgres, mariadb
        self.name = f"delayq_upgrade_{os.getpid()}"
        if postgres is not None:
            with self._postgres_admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
                admin.execute(f'CREATE DATABASE "{self.name}"')
            self.env = {
                "DELAYQ_UPGRADE_DB": "postgres",
                "DELAYQ_UPGRADE_DB_NAME": self.name,
                "DELAYQ_UPGRADE_PG_HOST": postgres.host,
                "DELAYQ_UPGRADE_PG_PORT": str(postgres.port),
            }
        elif mariadb is not None:
            with contextlib.closing(self._mariadb()) as admin:
                admin.cursor().execute(f"DROP DATABASE IF EXISTS `{self.name}`")
                admin.cursor().execute(
                    f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4"
                )
            self.env = {
                "DELAYQ_UPGRADE_DB": "mariadb",
                "DELAYQ_UPGRADE_DB_NAME": self.name,
                "DELAYQ_UPGRADE_MARIADB_HOST": mariadb.host,
                "DELAYQ_UPGRADE_MARIADB_PORT": str(mariadb.port),
                "DELAYQ_UPGRADE_MARIADB_USER": mariadb.user,
            }
        else:
            self.name = str(tmp / "upgrade.sqlite3")
            self.env = {
                "DELAYQ_UPGRADE_DB": "sqlite",
                "DELAYQ_UPGRADE_DB_NAME": self.name,
            }

    def _postgres_admin(self) -> psycopg.Connection[Any]:
        assert self.postgres is not None
        return psycopg.connect(
            host=self.postgres.host,
            port=self.postgres.port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
        )

    def _mariadb(self, database: str | None = None) -> Any:
        assert self.mariadb is not None
        return self.mariadb.connect(database)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.postgres is not None:
            with psycopg.connect(
                host=self.postgres.host,
                port=self.postgres.port,
                user="postgres",
                dbname=self.name,
            ) as db:
                return db.execute(sql).fetchall()
        if self.mariadb is not None:
            with contextlib.closing(self._mariadb(self.name)) as db:
                cursor = db.cursor()
                cursor.execute(sql)
                return list(cursor.fetchall())
        with contextlib.closing(sqlite3.connect(self.name, timeout=30)) as db:
            return db.execute(sql).fetchall()

    def count(self, sql: str) -> int:
        return int(self.query(sql)[0][0])

    def drop(self) -> None:
        if self.postgres is not None:
            with self._postgres_admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        elif self.mariadb is not None:
            with contextlib.closing(self._mariadb()) as admin:
                admin.cursor().execute(f"DROP DATABASE IF EXISTS `{self.name}`")


@dataclass
class Release:
    """One release's source tree, and the processes it runs."""

    name: str
    tree: Path
    env: dict[str, str]
    logs: Path
    processes: list[Process] = field(default_factory=list)

    def run(self, *args: str) -> None:
        """Run a management command to its end; fail with its output."""
        done = subprocess.run(
            [sys.executable, "-m", "django", *args],
            env=self.env,
            cwd=self.logs,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"{self.name}: {' '.join(args)} exited with {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )

    def start(self, label: str, *args: str) -> Process:
        process = Process(
            [sys.executable, "-m", "django", *args],
            log_path=self.logs / f"{self.name}-{label}.log",
            env=self.env,
            cwd=self.logs,
            label=f"{self.name} {label}",
        )
        process.start()
        self.processes.append(process)
        return process

    def start_loops(self, workers: int) -> list[Process]:
        """A dispatcher, ``workers`` workers and a sweeper, once each says
        it serves."""
        loops = [
            (
                self.start(
                    "dispatcher", "delayq_dispatch", "-v", "1", "--lease-ttl", "2"
                ),
                "serving",
            ),
            *(
                (
                    self.start(
                        f"worker-{n}", "delayq_worker", "-v", "1", "--concurrency", "2"
                    ),
                    "thread(s) on",
                )
                for n in range(workers)
            ),
            (
                self.start("sweeper", "delayq_sweep", "-v", "1", "--interval", "1"),
                "sweep:",
            ),
        ]
        for process, marker in loops:
            wait_for(
                lambda process=process, marker=marker: ready(process, marker),
                60,
                f"{process.label} ready",
            )
        return [process for process, _ in loops]

    def producer(self, *args: str) -> Process:
        return self.start(
            "producer",
            "upgrade_produce",
            "--release",
            self.name,
            "--report",
            str(self.report),
            *args,
        )

    @property
    def report(self) -> Path:
        return self.logs / f"{self.name}-producer.json"

    def stop(self) -> None:
        stop_together([p for p in self.processes if p.pid is not None], grace=20)


def ready(process: Process, marker: str) -> bool:
    if not process.alive():
        raise AssertionError(
            f"{process.label} exited while starting:\n{process.tail()}"
        )
    return marker in process.log()


def release_env(
    name: str, tree: Path, database: Database, redis_url: str, tmp: Path
) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
        and not key.startswith("DELAYQ_")
    }
    env.update(
        database.env,
        DJANGO_SETTINGS_MODULE="upgrade_project.settings",
        # The release's own tree first: it shadows the installed package.
        PYTHONPATH=os.pathsep.join([str(tree), str(tmp / "project")]),
        PYTHONPYCACHEPREFIX=str(tmp / "pycache"),
        DELAYQ_UPGRADE_RELEASE=name,
        DELAYQ_UPGRADE_REDIS_URL=redis_url,
    )
    return env


def test_a_rolling_upgrade_from_the_previous_release_runs_every_task_once(
    tmp_path: Path,
    postgres_server: PostgresServer | None,
    mariadb_server: MariaDBServer | None,
) -> None:
    began = time.monotonic()
    previous_tree = extract(PREVIOUS, tmp_path / "previous")
    shutil.copytree(PROJECT, tmp_path / "project")
    server = RedisServer()
    server.start()
    database = Database(tmp_path, postgres_server, mariadb_server)
    releases = [
        Release(
            name,
            tree,
            release_env(name, tree, database, server.url, tmp_path),
            tmp_path,
        )
        for name, tree in (("old", previous_tree), ("new", ROOT))
    ]
    try:
        run_the_deploy(*releases, database)
        check_the_outcome(*releases, database, server, time.monotonic() - began)
    finally:
        for release in reversed(releases):
            release.stop()
        server.close()
        database.drop()


def run_the_deploy(old: Release, new: Release, database: Database) -> None:
    def committed(release: Release) -> int:
        return database.count(
            "SELECT count(*) FROM django_delayq_delayedtask "
            f"""WHERE "key" LIKE '{release.name}-%'"""
        )

    def runs(release: Release) -> int:
        return database.count(
            "SELECT count(*) FROM upgrade_runs_run "
            f"""WHERE "release" = '{release.name}'"""
        )

    old.run("migrate", "-v", "0")
    old.start_loops(workers=2)
    # A backlog due over the whole deploy, then ten tasks a second.
    old.producer("--backlog", "200", "--backlog-span", "30")
    wait_for(lambda: runs(old) >= 20, 60, "the previous release running tasks")

    before = committed(old)
    new.run("migrate", "-v", "0")
    wait_for(
        lambda: committed(old) >= before + 30,
        30,
        "the previous release scheduling tasks after the migration",
    )

    new.start_loops(workers=1)
    new.producer("--priorities")
    # Tasks of every band, due and run while the previous release's
    # dispatcher and workers still run.
    wait_for(
        lambda: (
            database.count(
                "SELECT count(*) FROM django_delayq_delayedtask "
                "WHERE priority <> 0 AND status = 'succeeded'"
            )
            >= 30
        ),
        60,
        "tasks with a priority run beside the previous release",
    )
    assert_alive(old)
    old.stop()

    after = committed(new)
    wait_for(
        lambda: committed(new) >= after + 30,
        30,
        "the current release scheduling alone",
    )
    [producer] = [p for p in new.processes if p.label.endswith("producer")]
    stop_together([producer], grace=20)
    wait_for(
        lambda: (
            database.count(
                "SELECT count(*) FROM django_delayq_delayedtask "
                "WHERE status IN ('scheduled', 'running')"
            )
            == 0
        ),
        120,
        "the queue drained",
        poll=0.5,
    )
    assert_alive(new)


def assert_alive(release: Release) -> None:
    dead = [
        f"{p.label} exited with {p.popen.returncode if p.popen else '?'}:\n{p.tail()}"
        for p in release.processes
        if not p.alive() and not p.label.endswith("producer")
    ]
    assert not dead, "\n".join(dead)


def check_the_outcome(
    old: Release,
    new: Release,
    database: Database,
    server: RedisServer,
    seconds: float,
) -> None:
    reports = {}
    for release in (old, new):
        assert release.report.exists(), (
            f"the {release.name} producer left no report:\n"
            f"{log_tail(release.logs / f'{release.name}-producer.log')}"
        )
        reports[release.name] = json.loads(release.report.read_text())
    # No schedule() failed, on either side of the migration.
    assert {name: report["failed"] for name, report in reports.items()} == {
        "old": [],
        "new": [],
    }
    scheduled = {key for report in reports.values() for key in report["scheduled"]}

    rows = {
        key: (status, as_datetime(run_at), priority)
        for key, status, run_at, priority in database.query(
            'SELECT "key", status, run_at, priority FROM django_delayq_delayedtask'
        )
    }
    assert set(rows) == scheduled
    unfinished = {key: row[0] for key, row in rows.items() if row[0] != "succeeded"}
    assert unfinished == {}  # none failed (dead-lettered tasks end failed too)

    client = redis.Redis.from_url(server.url)
    try:
        dead = {
            f"delayq:{{{QUEUE}:{n}}}:dead": client.xrange(
                f"delayq:{{{QUEUE}:{n}}}:dead"
            )
            for n in range(SHARDS)
        }
    finally:
        client.close()
    assert {key: entries for key, entries in dead.items() if entries} == {}

    runs = database.query('SELECT "key", started_at, "release" FROM upgrade_runs_run')
    counts = Counter(key for key, _, _ in runs)
    # Every committed task ran exactly once, and nothing else ran.
    assert {key: n for key, n in counts.items() if n != 1} == {}
    assert set(counts) == set(rows)
    early = [
        f"{key} started at {started} before its run_at {rows[key][1]}"
        for key, started, _ in runs
        if as_datetime(started) < rows[key][1]
    ]
    assert early == []

    by_release = Counter(release for _, _, release in runs)
    banded = sum(1 for row in rows.values() if row[2] != 0)
    # Run out of their band by a worker that has no bands.
    unbanded = sum(1 for key, _, release in runs if release == "old" and rows[key][2])
    SUMMARY.append(
        f"upgrade from {PREVIOUS} on {settings.TEST_DB}: {len(rows)} tasks "
        f"({len(reports['old']['scheduled'])} scheduled by the previous release, "
        f"{len(reports['new']['scheduled'])} by the current one, {banded} of "
        f"them with a priority), run {by_release['old']} by the previous "
        f"release's workers ({unbanded} with a priority) and {by_release['new']} "
        f"by the current one's, each once, none early; {seconds:.0f} s"
    )


def as_datetime(value: Any) -> datetime.datetime:
    """A timestamp as the database returns it (SQLite: naive UTC text)."""
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    assert isinstance(value, datetime.datetime)
    return value
