"""docs/quickstart.md, followed as a new user follows it.

Every code block of the page is executed, in the page's order, in a fresh
temporary directory, with this virtualenv's Django and django-delayq:

- ``console`` blocks: each ``$`` line is run as a command (``python`` is
  this interpreter, ``django-admin`` its neighbour). ``pip install`` lines
  are checked to name the package and are not run. ``runserver`` and the
  ``delayq_*`` commands keep running in the background, as in the
  terminals the page asks for, until the end of the test; then each is
  stopped with SIGTERM, and the ``delayq_*`` commands must exit with 0.
  ``createsuperuser`` runs with ``--noinput`` and the
  ``DJANGO_SUPERUSER_*`` variables in place of the prompts.
- ``python`` blocks starting with a ``# path`` comment are that file's
  content; ``# path: add at the end`` appends to it. The Redis URL of the
  settings is replaced by the one of a private redis-server.
- blocks named ``quickstart-shell...`` run in one ``manage.py shell``
  process, in order and sharing their names, as typed into one session
  (with the automatic model imports of Django 5.2's shell turned off: the
  page's blocks import what they use); the one the page introduces with
  "a moment later" (``quickstart-shell-later``) is retried until it passes
  or 30 seconds went by, while the worker runs.

A block of any other kind fails the test, so that the page cannot grow a
step this test skips. Then the views are driven through Django's test
client (their URLs must exist), the tasks must be listed in the admin for
the superuser, the settings' ``LOGGING`` must show the warning of a web
process that cannot reach Redis, and the running server must answer.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.procs import free_port, wait_for
from tools.servers import RedisServer

# About 20 s on an idle machine: a dozen Django processes start.
pytestmark = pytest.mark.timeout(180)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
BIN = Path(sys.executable).parent
DOCS_REDIS_URL = "redis://127.0.0.1:6379/0"
LONG_RUNNING = {"runserver", "delayq_dispatch", "delayq_worker", "delayq_sweep"}
SUPERUSER = {"username": "admin", "password": "quickstart-admin"}

_FENCE = re.compile(
    r"^```(?P<kind>console|python|\{code-block\} python)\n"
    r"(?P<options>(?::[\w-]+:[^\n]*\n)*)\n?(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
_NAME = re.compile(r"^:name:\s*(?P<name>\S+)$", re.MULTILINE)
_PATH = re.compile(r"^# (?P<path>[\w/]+\.py)(?P<append>: add at the end)?$")


@dataclass(frozen=True)
class Block:
    line: int
    kind: str  # "console", "python" or "shell"
    code: str
    name: str = ""


def blocks() -> list[Block]:
    text = PAGE.read_text()
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        name = _NAME.search(match["options"])
        if match["kind"] == "console":
            found.append(Block(line, "console", match["code"]))
        elif name and name["name"].startswith("quickstart-shell"):
            found.append(Block(line, "shell", match["code"], name["name"]))
        else:
            found.append(Block(line, "python", match["code"]))
    return found


class Project:
    """The user's project directory, and the processes started in it."""

    def __init__(self, root: Path, redis_url: str) -> None:
        self.root = root
        self.redis_url = redis_url
        self.port = free_port()
        self.background: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.shell_code: list[tuple[str, str]] = []
        # A fresh user's environment: nothing of this test suite's.
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "DELAYQ_")) and key != "PYTHONPATH"
        }
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"

    # -- the page's blocks ---------------------------------------------------

    def follow(self, block: Block) -> None:
        where = f"{PAGE.name}:{block.line}"
        if block.kind == "console":
            for line in block.code.splitlines():
                assert line.startswith("$ "), f"{where}: not a command: {line!r}"
                self.command(shlex.split(line[2:]), where)
        elif block.kind == "shell":
            self.shell_code.append((block.name, block.code))
            if block.name == "quickstart-shell-later":
                self.run_shell(where)
        else:
            self.write(block.code, where)

    def command(self, argv: list[str], where: str) -> None:
        if argv[:2] == ["pip", "install"]:
            assert "django-delayq" in argv[-1], f"{where}: installs {argv[-1]}"
            return
        if argv[0] == "django-admin":
            argv = [str(BIN / "django-admin"), *argv[1:]]
        elif argv[:2] == ["python", "manage.py"]:
            argv = [sys.executable, *argv[1:]]
        else:
            pytest.fail(f"{where}: a command this test does not know: {argv}")
        subcommand = argv[2] if argv[1] == "manage.py" else ""
        env = dict(self.env)
        if subcommand == "createsuperuser":
            # The prompts, answered by the documented variables.
            argv.append("--noinput")
            env["DJANGO_SUPERUSER_USERNAME"] = SUPERUSER["username"]
            env["DJANGO_SUPERUSER_PASSWORD"] = SUPERUSER["password"]
            env["DJANGO_SUPERUSER_EMAIL"] = "admin@example.com"
        if subcommand in LONG_RUNNING:
            if subcommand == "runserver":
                argv += ["--noreload", f"127.0.0.1:{self.port}"]
            log = self.root / f"{subcommand}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    argv, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            self.background[subcommand] = (process, log)
            return
        done = subprocess.run(
            argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, (
            f"{where}: {shlex.join(argv[1:])} exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )

    def write(self, code: str, where: str) -> None:
        first, _, _ = code.partition("\n")
        header = _PATH.match(first)
        assert header, f"{where}: a python block must start with '# path'"
        path = self.root / header["path"]
        if DOCS_REDIS_URL in code:
            code = code.replace(DOCS_REDIS_URL, self.redis_url)
        if header["append"]:
            assert path.exists(), f"{where}: {header['path']} does not exist yet"
            with path.open("a") as file:
                file.write("\n\n" + code)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code)

    def run_shell(self, where: str) -> None:
        """Type the shell blocks so far into one ``manage.py shell``."""
        driver = textwrap.dedent(
            """
            import json, time
            namespace = {}
            for name, code in json.loads(BLOCKS):
                retry_until = time.monotonic() + (
                    30 if name == "quickstart-shell-later" else 0
                )
                while True:
                    try:
                        exec(compile(code, name, "exec"), namespace)
                        break
                    except AssertionError:
                        if time.monotonic() > retry_until:
                            raise
                        time.sleep(0.2)
            print("shell: all blocks ran")
            """
        ).replace("BLOCKS", repr(json.dumps(self.shell_code)))
        self.shell(driver, where)
        self.shell_code = []

    def shell(self, code: str, where: str) -> subprocess.CompletedProcess[str]:
        # Django 5.2's shell imports every model by itself; the page's blocks
        # must import what they use, so that is turned off.
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (
            f"{where}: the shell failed:\n{done.stdout}{done.stderr}\n" + self.logs()
        )
        return done

    # -- the processes -------------------------------------------------------

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}:\n{log.read_text(errors='replace')[-3000:]}"
            for name, (_, log) in self.background.items()
        )

    def stop(self) -> dict[str, int]:
        """SIGTERM each background command; their exit statuses."""
        for process, _ in self.background.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = {}
        for name, (process, _) in self.background.items():
            try:
                codes[name] = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait()
        return codes


BLOCKS = blocks()

# Driven through the views, with the test client, after the page's steps.
CHECK_VIEWS = """
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse

from django_delayq.models import DelayedTask
from shop.models import Order

setup_test_environment()
client = Client()
response = client.post(reverse("order-create"))
assert response.status_code == 302, response
order = Order.objects.latest("pk")
assert response["Location"] == reverse("order-detail", kwargs={"pk": order.pk})
assert client.get(response["Location"]).content.decode() == (
    f"Order {order.pk}: unpaid"
)
key = f"order-cancel:{order.pk}"
first = DelayedTask.objects.get(key=key)
assert first.status == "scheduled"
assert client.post(reverse("order-extend", kwargs={"pk": order.pk})).status_code == 302
assert DelayedTask.objects.get(pk=first.pk).run_at > first.run_at
assert client.post(reverse("order-pay", kwargs={"pk": order.pk})).status_code == 302
order.refresh_from_db()
assert order.status == "paid"
assert DelayedTask.objects.get(pk=first.pk).status == "cancelled"

assert client.login(username="USERNAME", password="PASSWORD")
listing = client.get("/admin/django_delayq/delayedtask/")
assert listing.status_code == 200
assert "shop.tasks.order_cancel" in listing.content.decode()
print("views: ok", order.pk)
"""

# What a web request does while Redis is down (the settings' REDIS_URL
# pointed at a port where nothing listens, in this process only).
REDIS_DOWN = """
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from django_delayq import schedule
from django_delayq.models import OutboxEntry
from shop.models import Order
from shop.tasks import order_cancel

down = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:9/0"}
with override_settings(DELAYQ=down), transaction.atomic():
    order = Order.objects.create()
    schedule(order_cancel, delay=900, args=[order.pk])
print("outbox:", OutboxEntry.objects.count())
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with RedisServer() as redis:
        project = Project(tmp_path, redis.url)
        try:
            yield project
        finally:
            project.stop()


def test_the_page_has_the_steps_this_test_follows():
    kinds = [block.kind for block in BLOCKS]
    assert kinds.count("shell") == 3
    assert [b.name for b in BLOCKS if b.kind == "shell"][-1] == (
        "quickstart-shell-later"
    )
    text = PAGE.read_text()
    assert DOCS_REDIS_URL in text
    assert "from shop.tasks import order_cancel" in text


def test_the_quickstart_works_as_written(project: Project):
    for block in BLOCKS:
        project.follow(block)
    assert not project.shell_code, "the shell blocks end with quickstart-shell-later"

    for name, (process, log) in project.background.items():
        assert process.poll() is None, f"{name} exited:\n{log.read_text()}"
    code = CHECK_VIEWS.replace("USERNAME", SUPERUSER["username"]).replace(
        "PASSWORD", SUPERUSER["password"]
    )
    assert "views: ok" in project.shell(code, "views").stdout

    # The LOGGING example: a web process that cannot reach Redis says so,
    # with a time and a level, and the task waits in the outbox.
    outage = project.shell(REDIS_DOWN, "LOGGING")
    assert "outbox: 1" in outage.stdout
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING django_delayq.outbox "
        r"django-delayq: Redis write for 1 task\(s\) failed .*queued in the outbox",
        outage.stderr,
        re.MULTILINE,
    ), outage.stderr

    # The running server serves the page the views redirect to.
    order_pk = 1
    url = f"http://127.0.0.1:{project.port}/orders/{order_pk}/"
    wait_for(lambda: _answers(url), 60, "runserver answering")
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.read().decode().startswith(f"Order {order_pk}: ")

    # "Stop them with SIGTERM or Ctrl-C: they finish what is in flight
    # first", and exit cleanly (runserver just dies of it).
    codes = project.stop()
    expected = {name: 0 for name in project.background if name != "runserver"}
    assert codes == {**expected, "runserver": -signal.SIGTERM}, project.logs()
    assert "1 processed" in project.background["delayq_worker"][1].read_text()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False
