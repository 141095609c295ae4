"""tools/run_example.sh, the script behind `make example`: it refuses a port
in use before starting anything, and Ctrl-C stops everything and exits
with 0 (so make reports no error)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.procs import LOOPBACK, free_port, wait_for

pytestmark = pytest.mark.timeout(200)

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "run_example.sh"


def _env(tmp_path: Path, port: object) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["EXAMPLE_PORT"] = str(port)
    env["SHOP_DB"] = str(tmp_path / "shop.sqlite3")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path, listening):
    env = _env(tmp_path, listening)
    # Never reached: the script stops before it needs Redis.
    env["DELAYQ_REDIS_URL"] = "redis://127.0.0.1:1/0"
    done = subprocess.run(
        [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert f"port {listening} on 127.0.0.1 is in use" in done.stderr
    assert "make example EXAMPLE_PORT=" in done.stderr
    assert "Shop:" not in done.stdout
    assert not (tmp_path / "shop.sqlite3").exists(), "migrate ran"


@pytest.mark.parametrize("port", ["abc", "0", "65536", "80x"])
def test_a_port_that_is_no_port_number_is_refused(tmp_path, port):
    env = _env(tmp_path, port)
    env["DELAYQ_REDIS_URL"] = "redis://127.0.0.1:1/0"
    done = subprocess.run(
        [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert f"EXAMPLE_PORT must be a port number (1-65535), not '{port}'" in (
        done.stderr
    )


def test_ctrl_c_stops_every_process_and_exits_0(tmp_path):
    port = free_port()
    # As `make example` runs it, in a process group of its own, which then
    # gets the SIGINT a terminal sends on Ctrl-C.
    runner = subprocess.Popen(
        [sys.executable, "-m", "tools.servers", "run", "--redis", "--", str(SCRIPT)],
        cwd=ROOT,
        env=_env(tmp_path, port),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # Long enough for a busy machine: four Django processes start.
        wait_for(lambda: _answers(f"http://{LOOPBACK}:{port}/"), 90, "the shop")
        os.killpg(runner.pid, signal.SIGINT)
        output = runner.communicate(timeout=60)[0].decode()
    finally:
        if runner.poll() is None:
            # SIGTERM first, so that tools.servers stops its redis-server.
            os.killpg(runner.pid, signal.SIGTERM)
            try:
                runner.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
            print(runner.communicate()[0].decode())  # shown if the test failed
    assert runner.returncode == 0, output
    assert f"Shop:      http://127.0.0.1:{port}/" in output
    assert "run_example: stopping" in output
    started = [int(pid) for pid in re.findall(r"started \(pid=(\d+)\)", output)]
    assert len(started) == 4, output  # web, dispatcher, worker, sweeper
    # Stopped by their PIDs, none left behind (orphans are reaped by init).
    wait_for(lambda: not any(_alive(pid) for pid in started), 10, "all stopped")
    with socket.socket() as sock:
        # The web server's port is free again (for a server that, like
        # runserver, binds with SO_REUSEADDR: closed connections linger).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
