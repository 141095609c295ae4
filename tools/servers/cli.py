"""``python -m tools.servers run [--redis] [--postgres] [--mariadb] -- COMMAND``:
the servers live exactly as long as the command."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from tools.servers.base import ServerError
from tools.servers.mariadb import MariaDBServer
from tools.servers.postgres import PostgresServer
from tools.servers.redis import RedisServer


def _say(message: str) -> None:
    print(f"servers: {message}", file=sys.stderr, flush=True)


def _terminal_reaches_us() -> bool:
    """True if a Ctrl-C at our terminal goes to our whole process group.

    The child shares our group, so it then gets the SIGINT directly and
    forwarding it would deliver it twice.
    """
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _run_child(command: list[str], env: dict[str, str]) -> int:
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is None:
            raise KeyboardInterrupt  # not started yet: just give up
        if signum == signal.SIGINT and _terminal_reaches_us():
            return
        child.send_signal(signum)

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as exc:
            _say(f"cannot run {command[0]}: {exc}")
            return 127
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Like a shell: death by signal N is exit status 128 + N.
    return 128 - code if code < 0 else code


def _cmd_run(args: argparse.Namespace) -> int:
    command: list[str] = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _say("no command given (usage: run [--redis] [--postgres] [--mariadb] -- CMD)")
        return 2
    env = dict(os.environ)
    with contextlib.ExitStack() as servers:
        if args.redis:
            redis = servers.enter_context(RedisServer(args.redis_port or None))
            env["DELAYQ_REDIS_URL"] = redis.url
            _say(f"redis-server pid {redis.pid} at {redis.url}")
        if args.postgres:
            pg = servers.enter_context(PostgresServer(args.postgres_port or None))
            env["DELAYQ_PG_HOST"] = pg.host
            env["DELAYQ_PG_PORT"] = str(pg.port)
            env["DELAYQ_PG_USER"] = pg.user
            env["DELAYQ_PG_NAME"] = pg.dbname
            _say(f"postgres pid {pg.pid} at {pg.url}")
        if args.mariadb:
            mariadb = servers.enter_context(MariaDBServer(args.mariadb_port or None))
            env["DELAYQ_MARIADB_HOST"] = mariadb.host
            env["DELAYQ_MARIADB_PORT"] = str(mariadb.port)
            env["DELAYQ_MARIADB_USER"] = mariadb.user
            env["DELAYQ_MARIADB_NAME"] = mariadb.dbname
            _say(f"mariadb pid {mariadb.pid} at {mariadb.url}")
        code = _run_child(command, env)
        _say("stopping servers")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.servers",
        description="Run private Redis/PostgreSQL/MariaDB servers for development.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser(
        "run",
        help="start servers, run a command with their addresses, stop them",
        description=(
            "Start the requested servers, run COMMAND with DELAYQ_REDIS_URL, "
            "DELAYQ_PG_HOST/PORT/USER/NAME and DELAYQ_MARIADB_HOST/PORT/USER/NAME "
            "in its environment, stop the "
            "servers when it exits, and exit with its status."
        ),
    )
    run.add_argument("--redis", action="store_true", help="start a redis-server")
    run.add_argument("--postgres", action="store_true", help="start PostgreSQL")
    run.add_argument("--mariadb", action="store_true", help="start MariaDB")
    run.add_argument(
        "--redis-port", type=int, default=0, metavar="N", help="0: any free port"
    )
    run.add_argument(
        "--postgres-port", type=int, default=0, metavar="N", help="0: any free port"
    )
    run.add_argument(
        "--mariadb-port", type=int, default=0, metavar="N", help="0: any free port"
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]")
    args = parser.parse_args(argv)
    try:
        return _cmd_run(args)
    except ServerError as exc:
        _say(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130
