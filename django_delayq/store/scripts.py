"""Lua scripts, kept as ``lua/<name>.lua`` files and loaded by name.

A script is sent with ``EVALSHA``; the first call on a connection pool that
finds it missing (``NOSCRIPT``: a new or restarted Redis) loads it with
``SCRIPT LOAD`` and retries once. Unlike redis-py's ``Script`` inside a
pipeline, this never spends an extra ``SCRIPT EXISTS`` round trip.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis

from .errors import translated

KeyT = str | bytes
ArgT = str | bytes | int | float


class LuaScript:
    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    @translated
    def __call__(
        self, client: redis.Redis, keys: Sequence[KeyT], args: Sequence[ArgT]
    ) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            # EVAL, not SCRIPT LOAD: it goes to the node serving the keys
            # and caches the script there, while a cluster client sends
            # SCRIPT LOAD to every primary, and fails if one is down.
            return client.eval(self.source, len(keys), *keys, *args)


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

    try:
        return send(by_source=False)
    except redis.exceptions.NoScriptError:
        return send(by_source=True)


@functools.cache
def load(name: str) -> LuaScript:
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return LuaScript(name, source)
