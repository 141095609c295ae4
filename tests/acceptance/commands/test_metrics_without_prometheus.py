"""Without prometheus-client the package works as before, and asking for
metrics is a clear error that names the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import ROOT, Processes
from tests.testapp.tasks import record
from tools.servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

#: Run in a fresh interpreter: the worker path imports no prometheus_client.
WORK_THEN_LOOK = """
import sys
import django
django.setup()
from django.core.management import call_command
call_command("delayq_dispatch", "--once", verbosity=0)
call_command("delayq_worker", "--once", verbosity=0)
import django_delayq.metrics
assert not django_delayq.metrics.enabled()
print("imported:", "prometheus_client" in sys.modules)
"""


@pytest.fixture
def without_prometheus(processes: Processes, tmp_path: Path) -> dict[str, str]:
    """The processes' environment, where ``import prometheus_client`` fails as
    it does when the package is not installed."""
    blocker = tmp_path / "blocked" / "prometheus_client"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'prometheus_client'\")\n"
    )
    return {**processes.env, "PYTHONPATH": f"{blocker.parent}:{ROOT}"}


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_package_runs_tasks_without_prometheus_client(
    without_prometheus: dict[str, str], redis_client: redis.Redis
) -> None:
    task = schedule(record, args=["no-metrics"])
    done = run(without_prometheus, "-c", WORK_THEN_LOOK)
    assert done.returncode == 0, done.stderr
    assert "imported: False" in done.stdout
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED


def test_without_metrics_the_worker_never_imports_prometheus_client(
    processes: Processes, redis_client: redis.Redis
) -> None:
    """Installed but not asked for: not even imported (no cost at all)."""
    task = schedule(record, args=["installed-unused"])
    done = run(processes.env, "-c", WORK_THEN_LOOK)
    assert done.returncode == 0, done.stderr
    assert "imported: False" in done.stdout
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED


@pytest.mark.parametrize(
    "command",
    [
        ["delayq_worker", "--once"],
        ["delayq_worker", "--processes", "2"],
        ["delayq_dispatch", "--once"],
        ["delayq_sweep", "--once"],
        ["delayq_run"],
    ],
)
def test_metrics_port_without_prometheus_client_names_the_extra(
    without_prometheus: dict[str, str],
    redis_client: redis.Redis,
    command: list[str],
    tmp_path: Path,
) -> None:
    port = str(free_port())
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**without_prometheus, "TMPDIR": str(temporary)}
    done = run(env, "-m", "django", *command, "--metrics-port", port)
    assert done.returncode == 1, done.stderr
    assert (
        "CommandError: --metrics-port needs prometheus-client, which is not "
        "installed: pip install 'django-delayq[prometheus]'"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    # Nothing left behind (a supervisor's metrics directory).
    assert list(temporary.iterdir()) == []


def test_importing_the_view_without_prometheus_client_names_the_extra(
    without_prometheus: dict[str, str],
) -> None:
    done = run(
        without_prometheus,
        "-c",
        "import django; django.setup(); import django_delayq.metrics.views",
    )
    assert done.returncode == 1
    assert (
        "django_delayq.exceptions.MetricsUnavailable: metrics need "
        "prometheus-client, which is not installed: "
        "pip install 'django-delayq[prometheus]'"
    ) in done.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--metrics-port", "0"], "--metrics-port must be from 1 to 65535; got 0."),
        (["--metrics-port", "70000"], "--metrics-port must be from 1 to 65535"),
        (["--metrics-addr", "0.0.0.0"], "--metrics-addr needs --metrics-port PORT."),
    ],
)
def test_bad_metrics_options_are_refused_before_anything_starts(
    processes: Processes, options: list[str], message: str
) -> None:
    done = run(processes.env, "-m", "django", "delayq_dispatch", "--once", *options)
    assert done.returncode == 1
    assert message in done.stderr
