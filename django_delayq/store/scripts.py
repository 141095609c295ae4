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

KeyT = str | bytes
ArgT = str | bytes | int | float


class LuaScript:
    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(
        self, client: redis.Redis, keys: Sequence[KeyT], args: Sequence[ArgT]
    ) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


#: One script call: the script, its keys, its arguments.
Call = tuple[LuaScript, Sequence[KeyT], Sequence[ArgT]]


def run_many(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one round trip (a pipeline, not a transaction:
    on a cluster it is split by node); their replies, in order.

    A script missing on a server (``NOSCRIPT``: a restarted Redis, or a
    replica promoted after a failover, which never had the script cache) is
    loaded and the whole pipeline sent again, as the replies do not tell
    which calls ran: a script sent this way must be safe to run twice.
    """

    def send() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                "EVALSHA", script.sha, len(keys), *keys, *args
            )
        replies: list[Any] = pipe.execute()
        return replies

    try:
        return send()
    except redis.exceptions.NoScriptError:
        for script in {call[0].name: call[0] for call in calls}.values():
            client.script_load(script.source)
        return send()


@functools.cache
def load(name: str) -> LuaScript:
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return LuaScript(name, source)
