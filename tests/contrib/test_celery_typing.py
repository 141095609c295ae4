"""A @shared_task keeps its function's types: mypy --strict checks a
direct call's value and delay()'s arguments, a bound task's without the
task it takes first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.procs import ROOT

pytestmark = pytest.mark.timeout(300)

USER_CODE = """
from typing import Any

from django_delayq.contrib.celery import shared_task


@shared_task
def add(x: int, y: int) -> int:
    return x + y


@shared_task(bind=True, max_retries=3)
def remind(self: Any, order_id: int) -> str:
    return str(order_id)


total: int = add(1, 2)
wrong: str = add(1, 2)  # error
add.delay("a", 2)  # error
remind.delay(7)
remind.delay("x")  # error
reveal_type(remind)
"""


def test_mypy_checks_calls_of_a_shared_task(tmp_path: Path) -> None:
    source = tmp_path / "tasks.py"
    source.write_text(USER_CODE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "--config-file",
            "",
            str(source),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    lines = done.stdout.splitlines()
    errors = [int(line.split(":")[1]) for line in lines if ": error:" in line]
    marked = [
        number
        for number, line in enumerate(USER_CODE.splitlines(), start=1)
        if line.endswith("# error")
    ]
    assert errors == marked, done.stdout
    assert "CeleryTask[[order_id: int], str]" in done.stdout, done.stdout
