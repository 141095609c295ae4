"""The peers' workers and schedulers, run as real subprocesses of their CLIs.

Each process leads a session of its own (:mod:`tools.procs`), so that its
pool children, forked work horses and scheduler processes share its process
group; stopping signals the leader first (the peer's own graceful
shutdown), then kills what is left of the group after the grace period.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.procs import Process, stop_together

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]

__all__ = ["REPO_ROOT", "Proc", "cli", "stop_all"]


def cli(name: str) -> str:
    """Path of a console script installed next to this interpreter."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    raise FileNotFoundError(
        f"{name} not found next to {sys.executable}: install the bench group "
        "(uv pip install --group bench) into this environment"
    )


class Proc(Process):
    """One CLI process, started at once, its output in ``log_path``."""

    def __init__(
        self,
        label: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
    ) -> None:
        child_env = {**os.environ, **env}
        # The CLIs import benchmarks.peers.* by name from the repository.
        paths = [str(REPO_ROOT), child_env.get("PYTHONPATH", "")]
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        super().__init__(
            argv, log_path=log_path, env=child_env, cwd=REPO_ROOT, label=label,
            grace=15.0,
        )  # fmt: skip
        self.start()
        logger.info("started %s: pid %s: %s", label, self.pid, " ".join(argv))

    def log_tail(self, lines: int = 15) -> str:
        return self.tail(lines)


def stop_all(procs: Sequence[Proc]) -> None:
    """Stop every process, all at once, within one grace period."""
    stop_together(procs, grace=15.0)
