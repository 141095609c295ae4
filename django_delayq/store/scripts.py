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
from redis.client import Pipeline

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

    def queue(self, pipe: Pipeline, keys: Sequence[KeyT], args: Sequence[ArgT]) -> None:
        """Add a call to a pipeline; pair with :func:`execute_pipeline`."""
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA", self.sha, len(keys), *keys, *args
        )


def execute_pipeline(
    client: redis.Redis, pipe: Pipeline, scripts: Sequence[LuaScript]
) -> list[Any]:
    """Run a pipeline of script calls, loading the scripts once if missing."""
    commands = list(pipe.command_stack)
    try:
        return pipe.execute()
    except redis.exceptions.NoScriptError:
        for script in scripts:
            client.script_load(script.source)
        retry = client.pipeline(transaction=False)
        for args, options in commands:
            retry.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        return retry.execute()


@functools.cache
def load(name: str) -> LuaScript:
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return LuaScript(name, source)
