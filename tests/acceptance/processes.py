"""Running django-delayq's commands as real processes against the test
session's database and Redis, and stopping them by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tools.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {seconds} s: {what}")
        time.sleep(0.05)


class Processes:
    """Start ``manage.py``-style commands; everything is stopped at teardown."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, command: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{command}-{len(self.started)}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "django", command, "-v", "2", *args],
            env=self.env,
            cwd=ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.started.append(process)
        return process

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

    def log(self, process: subprocess.Popen[bytes]) -> str:
        index = self.started.index(process)
        name = Path(str(process.args[3]))  # the command
        return (self.logs / f"{name}-{index}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
    if settings.TEST_DB == "postgres":
        env.update(DELAYQ_PG_HOST=str(db["HOST"]), DELAYQ_PG_PORT=str(db["PORT"]))
    running = Processes(env, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()
