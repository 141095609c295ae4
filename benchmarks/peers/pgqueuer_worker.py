"""A PgQueuer worker: what ``pgq run`` does, without its command line.

pgqueuer 1.6.0's ``pgq run`` exits at start-up with an AttributeError: its
``--log-level`` parser hands the logging setup a string where it expects a
``LogLevel``, with or without the option. So this calls the same pieces the
command calls, in the same order: the logging setup, then
``pgqueuer.run(factory, ...)`` (the documented way to run a worker from code)
on the event loop the command picks (uvloop when installed).

    python -m benchmarks.peers.pgqueuer_worker [--batch-size N] [--log-level L]
"""

from __future__ import annotations

import argparse
import sys

import pgqueuer
from pgqueuer.adapters.cli.cli import asyncio_run
from pgqueuer.core.logconfig import LogLevel, setup_fancy_logger

FACTORY = "benchmarks.peers.pgqueuer_peer:create_pgqueuer"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The defaults are `pgq run`'s own.
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--log-level", default="INFO", choices=LogLevel.__members__)
    args = parser.parse_args()
    setup_fancy_logger(LogLevel[args.log_level])
    asyncio_run(pgqueuer.run(FACTORY, batch_size=args.batch_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
