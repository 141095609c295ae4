"""A measurement in a Python process of its own, and its result back.

Django is configured once per process, and one scenario's figures must not
carry what an earlier one left behind (connections, caches, registries), so
every scenario and every peer run is ``python -m <module>`` in a fresh
interpreter that prints its result as JSON on its last line of output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "benchmarks.harness.settings"
#: Where the children's bytecode goes: outside the work tree and the
#: virtualenv, shared by every run (as tests/faults does).
PYCACHE = Path(tempfile.gettempdir()) / "delayq-bench-pycache"


def cache_bytecode(env: MutableMapping[str, str]) -> None:
    """Let the processes started with ``env`` keep their bytecode.

    Under ``PYTHONDONTWRITEBYTECODE`` (and a virtualenv installed without
    bytecode) every process compiles Django, redis-py and the package again:
    seconds of start-up for every scenario, worker, dispatcher and peer
    process of a run, none of it a figure. The cache then goes to
    :data:`PYCACHE`, so nothing is written beside the sources; without the
    variable, Python's own caching is left as it is."""
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)


def harness_env(**servers: str) -> dict[str, str]:
    """This process's environment with the benchmarks' Django settings, the
    repository importable, and ``servers`` (``DELAYQ_REDIS_URL=...``) added."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        PYTHONPATH=str(REPO_ROOT),
        **servers,
    )
    cache_bytecode(env)
    return env


def run_json(
    *argv: str,
    timeout: float,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    quiet: bool = False,
) -> Any:
    """Run ``python -m <argv>`` from the repository's root; return the JSON
    its last non-blank line of output holds.

    Only the last line counts: the libraries a child loads may print before
    it. ``env`` None inherits this process's environment; ``quiet`` drops
    the child's stderr (the server runner's start-up lines). A child that
    fails raises :class:`subprocess.CalledProcessError`, one that overruns
    ``timeout`` seconds :class:`subprocess.TimeoutExpired`.
    """
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        env=env,
        cwd=REPO_ROOT,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
        timeout=timeout,
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])
