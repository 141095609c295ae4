"""The peers' workers and schedulers, run as real subprocesses of their CLIs.

Each process leads a session of its own, so that its pool children, forked
work horses and scheduler processes share its process group; stopping
signals the leader first (the peer's own graceful shutdown), then kills
what is left of the group, by the group id, which is the leader's PID.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL the child if the harness dies first."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def cli(name: str) -> str:
    """Path of a console script installed next to this interpreter."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    raise FileNotFoundError(
        f"{name} not found next to {sys.executable}: install the bench group "
        "(uv pip install --group bench) into this environment"
    )


class Proc:
    """One CLI process, its log file, and its stop by PID."""

    def __init__(
        self,
        label: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
    ) -> None:
        self.label = label
        self.argv = list(argv)
        self.log_path = log_path
        child_env = dict(os.environ)
        child_env.update(env)
        # The CLIs import benchmarks.peers.* by name from the repository.
        paths = [str(REPO_ROOT), child_env.get("PYTHONPATH", "")]
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=REPO_ROOT,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid
        atexit.register(self.kill)
        logger.info("started %s: pid %d: %s", label, self.pid, " ".join(self.argv))

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """Graceful stop (SIGTERM to the leader), then SIGKILL to the group."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                logger.warning("%s (pid %d) ignored SIGTERM", self.label, self.pid)
        self.kill()

    def kill(self) -> None:
        """SIGKILL whatever is left of the process group; reap the leader."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        atexit.unregister(self.kill)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(procs: Sequence[Proc]) -> None:
    """Stop every process, leaders first, all at once, within one grace."""
    for proc in procs:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15.0
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        proc.kill()
