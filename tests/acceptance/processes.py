"""Running django-delayq's commands as real processes against the test
session's database and Redis, and stopping them by PID; and the example shop
run the way `make example` runs it."""

from __future__ import annotations

import datetime
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
from django.conf import settings
from django.db import connection

from tests.acceptance.shop_database import ShopDatabase
from tests.support.helpers import database_env
from tools.procs import (
    ROOT,
    HTTPProcess,
    Process,
    django_command,
    free_port,
    stop_together,
)
from tools.servers import MariaDBServer, PostgresServer, RedisServer


def pid_namespaces_usable() -> bool:
    """Whether this host lets the tests start a process in a PID namespace
    of its own (util-linux ``unshare``, run as root)."""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def namespaced_pid(unshare: subprocess.Popen[str]) -> int:
    """The PID, as this test sees it, of the command ``unshare`` started."""
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
    found = children.read_text().split()
    assert len(found) == 1, f"unshare {unshare.pid} has children {found}"
    return int(found[0])


class Processes:
    """Start ``manage.py``-style commands; everything is stopped at teardown."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.started: list[Process] = []

    def start(self, command: str, *args: str) -> subprocess.Popen[str]:
        """Start ``command``; the test signals and waits for its process."""
        process = django_command(
            command,
            *args,
            verbosity=2,
            log_path=self.logs / f"{command}-{len(self.started)}.log",
            env=self.env,
        )
        self.started.append(process)
        assert process.popen is not None
        return process.popen

    def start_as_pid_one(self, command: str, *args: str) -> subprocess.Popen[str]:
        """Start ``command`` as the first process of a PID namespace of its
        own, where it is PID 1, as the first process of every container is
        (``unshare --pid --fork``, as root). The Popen is ``unshare``'s:
        signal the command itself through :func:`namespaced_pid`."""
        process = Process(
            [
                "unshare",
                "--pid",
                "--fork",
                "--kill-child",
                sys.executable,
                "-m",
                "django",
                command,
                "-v",
                "2",
                *args,
            ],
            log_path=self.logs / f"{command}-{len(self.started)}.log",
            env=self.env,
            cwd=ROOT,
            label=command,
        )
        process.start()
        self.started.append(process)
        assert process.popen is not None
        return process.popen

    def run(self, command: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "django", command, *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    def log(self, popen: subprocess.Popen[str]) -> str:
        return next(p for p in self.started if p.popen is popen).log()

    def stop_all(self) -> None:
        stop_together(self.started, grace=20)


@pytest.fixture
def processes(redis_server: RedisServer, tmp_path: Path) -> Iterator[Processes]:
    """Commands sharing this test's database (committed data) and Redis."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "DELAYQ_TEST_DB": settings.TEST_DB,
        "DELAYQ_TEST_SHARED_DB": str(db["NAME"]),
        "DELAYQ_REDIS_URL": redis_server.url,
    }
    env.update(database_env(db, settings.TEST_DB))
    running = Processes(env, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


# -- the example shop ---------------------------------------------------------

PROCFILE = ROOT / "Procfile.example"


def procfile_commands(port: int) -> dict[str, list[str]]:
    """The processes of ``Procfile.example`` by name, as `make example` runs
    them, with this interpreter and the web server on ``port``."""
    commands: dict[str, list[str]] = {}
    for line in PROCFILE.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, command = line.partition(":")
        # The one variable the Procfile uses, which honcho sets to the port.
        argv = shlex.split(command.replace("${PORT:-8000}", str(port)))
        assert not any("$" in arg for arg in argv), f"unexpanded variable: {line}"
        if argv[0] == "python":
            argv[0] = sys.executable
        commands[name.strip()] = argv
    assert "web" in commands, "Procfile.example has no web process"
    return commands


#: The example shop's periodic schedules: name, definition.
SHOP_SCHEDULES = (
    ("close-stale-orders", "every 30 s"),
    ("daily-orders-report", "cron 0 8 * * * Asia/Shanghai"),
)


class ExampleShop:
    """The example project as `make example` runs it: migrated, with the demo
    superuser and every process of ``Procfile.example`` (web server,
    dispatcher, worker, sweeper), on ``redis_url``, with the environment
    ``env`` (e.g. short delays) on top. Its data is in a SQLite file of its
    own in ``directory``, or in a database of its own on ``server`` (dropped
    at the stop).

    Use it as a context manager; each process logs to ``directory/NAME.log``.
    ``template`` is a SQLite database that :meth:`prepare` made, copied
    instead of migrating again (a few seconds saved per start).

    The shop's periodic schedules start paused (their rows written before
    any process starts), so that no tick adds to the tasks a test counts; a
    test that wants them resumes them.
    """

    def __init__(
        self,
        redis_url: str,
        directory: Path,
        env: Mapping[str, str] | None = None,
        template: ShopDatabase | None = None,
        server: PostgresServer | MariaDBServer | None = None,
    ) -> None:
        self.directory = directory
        self.template = template
        self.database = ShopDatabase(directory, server)
        #: The SQLite file, when the shop keeps its data in one.
        self.db = self.database.file
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DELAYQ_REDIS_URL": redis_url,
            **self.database.env,
            **(env or {}),
        }
        self.commands = procfile_commands(self.port)
        self.started: dict[str, Process] = {}

    def manage(self, *args: str) -> str:
        """Run one ``manage.py`` command to completion and return its output."""
        done = subprocess.run(
            [sys.executable, "example_project/manage.py", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    def prepare(self) -> ShopDatabase:
        """Create and migrate the database, with the demo superuser and the
        shop's schedules paused; return it."""
        self.database.create()
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("demo_superuser")
        now = datetime.datetime.now(datetime.UTC)
        for name, definition in SHOP_SCHEDULES:
            self.database.query(
                "INSERT INTO django_delayq_periodicschedule (name, definition, "
                "planned_through, paused, paused_at, created_at) "
                "VALUES (?, ?, ?, TRUE, ?, ?)",
                (name, definition, now, now, now),
            )
        return self.database

    def start(self) -> None:
        if not self.database.create(self.template):
            # A server's database is migrated again: it has no cheap copy.
            self.prepare()
        for name, argv in self.commands.items():
            options = {
                "log_path": self.directory / f"{name}.log",
                "env": self.env,
                "cwd": ROOT,
                "label": name,
                "grace": 20.0,
            }
            process = (
                HTTPProcess(argv, url=self.url + "/", method="GET", **options)
                if name == "web"
                else Process(argv, **options)
            )
            self.started[name] = process
            try:
                process.start()
            except Exception as exc:
                raise AssertionError(
                    f"the example's {name} did not start ({exc}):\n{self.log(name)}"
                ) from None

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        """Every process's log, for a failing test's report."""
        return "\n".join(f"---- {name} ----\n{self.log(name)}" for name in self.started)

    def stop(self) -> None:
        stop_together(list(self.started.values()), grace=20)
        self.database.drop()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
