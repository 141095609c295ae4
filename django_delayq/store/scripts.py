"""Lua scripts, kept as ``lua/<name>.lua`` files and loaded by name.

A script is sent with ``EVALSHA``; a call that finds it missing
(``NOSCRIPT``: a new or restarted Redis) sends it again with its source
(``EVAL``, which caches it on the server), once. Unlike redis-py's
``Script`` inside a pipeline, this never spends an extra ``SCRIPT EXISTS``
round trip, and needs no ``SCRIPT`` command.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Any

import redis

from .errors import translated

KeyT = str | bytes
ArgT = str | bytes | int | float


#: How Redis 7.0 refuses a command a script calls: without the
#: NOPERM code or the command's name, but with the script and the line.
_SCRIPT_DENIAL = re.compile(
    r"can't run this command or subcommand script: (?P<sha>[0-9a-f]{40}), "
    r"on @user_script:(?P<line>\d+)"
)
_CALL = re.compile(r"redis\.p?call\(\s*'(?P<command>[A-Za-z]+)'")
_by_sha: dict[str, LuaScript] = {}


class LuaScript:
    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        _by_sha[self.sha] = self

    def __call__(
        self, client: redis.Redis, keys: Sequence[KeyT], args: Sequence[ArgT]
    ) -> Any:
        return self.run(client, keys, args)[0]

    @translated
    def run(
        self, client: redis.Redis, keys: Sequence[KeyT], args: Sequence[ArgT]
    ) -> tuple[Any, bool]:
        """The script's reply, and whether the server had to be sent its
        source (``NOSCRIPT``): a server that never ran it since it started,
        as a restarted Redis or a replica just promoted (whose script cache
        starts empty: scripts are not replicated), which is what
        :mod:`.epochs` takes as a sign that its data may be older than it was."""
        with _denials_named():
            try:
                return client.evalsha(self.sha, len(keys), *keys, *args), False
            except redis.exceptions.NoScriptError:
                # EVAL, not SCRIPT LOAD: it goes to the node serving the keys
                # and caches the script there, while a cluster client sends
                # SCRIPT LOAD to every primary, and fails if one is down.
                return client.eval(self.source, len(keys), *keys, *args), True


@contextlib.contextmanager
def _denials_named() -> Iterator[None]:
    """Raise a command a script may not call as ``NOPERM`` naming the
    command, the script and the line, which the ACL user is to be granted."""
    try:
        yield
    except redis.ResponseError as exc:
        match = _SCRIPT_DENIAL.search(str(exc))
        script = _by_sha.get(match["sha"]) if match else None
        if match is None or script is None:
            raise
        line = int(match["line"])
        # A call may open on that line and name its command on the next.
        around = "\n".join(script.source.splitlines()[line - 1 : line + 1])
        called = _CALL.search(around)
        command = called["command"].lower() if called else "a command it calls"
        raise redis.exceptions.NoPermissionError(
            f"this user has no permissions to run the '{command}' command "
            f"(called by {script.name}.lua, line {line})"
        ) from exc


#: One script call: the script, its keys, its arguments.
Call = tuple[LuaScript, Sequence[KeyT], Sequence[ArgT]]


@translated
def run_many(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one round trip (a pipeline, not a transaction:
    on a cluster it is split by node); their replies, in order.

    A script missing on a server (``NOSCRIPT``: a restarted Redis, or a
    replica promoted after a failover, which never had the script cache)
    makes the whole pipeline go again with the scripts' sources (``EVAL``,
    which caches them on the nodes that run them), as the replies do not
    tell which calls ran: a script sent this way must be safe to run twice.
    """

    def send(by_source: bool) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                *(("EVAL", script.source) if by_source else ("EVALSHA", script.sha)),
                len(keys),
                *keys,
                *args,
            )
        replies: list[Any] = pipe.execute()
        return replies

    with _denials_named():
        try:
            return send(by_source=False)
        except redis.exceptions.NoScriptError:
            return send(by_source=True)


@translated
def run_each(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one round trip, as :func:`run_many`, but with each
    call's error as its reply (a :class:`redis.ResponseError`), so that one
    failing call never hides what the others did: a read that delivered
    entries must hand them over even when another shard's read failed, or
    they wait, delivered and unseen, for the visibility timeout.

    Only the calls that found their script missing (``NOSCRIPT``) go again,
    with its source: the others ran, and are not run twice. A refused
    command (an ACL denial) is raised, as by :func:`run_many`.
    """

    def send(chosen: Sequence[Call], by_source: bool) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for script, keys, args in chosen:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                *(("EVAL", script.source) if by_source else ("EVALSHA", script.sha)),
                len(keys),
                *keys,
                *args,
            )
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    replies = send(calls, by_source=False)
    missing = [
        i
        for i, reply in enumerate(replies)
        if isinstance(reply, redis.exceptions.NoScriptError)
    ]
    if missing:
        again = send([calls[i] for i in missing], by_source=True)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    with _denials_named():
        for reply in replies:
            if isinstance(reply, redis.exceptions.NoPermissionError) or (
                isinstance(reply, redis.ResponseError)
                and _SCRIPT_DENIAL.search(str(reply))
            ):
                raise reply
    return replies


@functools.cache
def load(name: str) -> LuaScript:
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return LuaScript(name, source)
