"""Run one :func:`run_peer` in a child process, and read its result.

Django is configured once per process, and procrastinate and django-tasks-db
each need it configured for a database of their own; the quick run of
``python -m benchmarks`` also measures several peers at once, in threads. So
the command lines run every peer (Redis ones too, for one code path) in a
fresh interpreter::

    python -m benchmarks.peers.child < '{"name": "rq", "kwargs": {...}}'

which prints the result as JSON on its last stdout line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness.child import run_json
from benchmarks.peers.stats import empty_result

# The child's log level (WARNING unless set), as the parent's -v asks.
LOG_LEVEL_ENV = "DELAYQ_PEER_LOG_LEVEL"


def run_peer_in_child(name: str, *, timeout: float, **kwargs: Any) -> dict[str, Any]:
    """:func:`benchmarks.peers.runner.run_peer` in a fresh interpreter.

    A child that fails or overruns ``timeout`` seconds gives a result with
    no figures and the reason in ``errors``, as run_peer itself would.
    """
    request = {
        "name": name,
        "kwargs": {
            key: str(value) if isinstance(value, Path) else value
            for key, value in kwargs.items()
        },
    }
    try:
        result: dict[str, Any] = run_json(
            __name__, stdin=json.dumps(request), timeout=timeout
        )
        return result
    except (subprocess.SubprocessError, ValueError, IndexError) as exc:
        return _failed(name, kwargs, f"child process: {type(exc).__name__}: {exc}")


def _failed(name: str, kwargs: dict[str, Any], error: str) -> dict[str, Any]:
    light, steady = kwargs.get("light", (1, 1)), kwargs.get("steady", (1, 1))
    return empty_result(name, light, steady, kwargs.get("burst_n", 0), [error])


def main() -> int:
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "WARNING"),
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    from benchmarks.peers.runner import run_peer

    request = json.loads(sys.stdin.read())
    kwargs = dict(request["kwargs"])
    for key in ("light", "steady"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    if kwargs.get("log_dir") is not None:
        kwargs["log_dir"] = Path(kwargs["log_dir"])
    result = run_peer(request["name"], **kwargs)
    # The last line is the result: the peers' clients may print before it.
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
