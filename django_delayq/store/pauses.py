"""The paused queues' mirror, ``<prefix>:paused`` (``lua/paused.lua``).

The rows (:class:`~django_delayq.models.PausedQueue`) are the truth; this
hash lets a worker check them with one ``HGETALL``. A hash without its
``~known`` field (lost with Redis data, or never written) says nothing:
:func:`read` returns ``None`` then, and the caller asks the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import scripts
from .connection import Client
from .errors import translated
from .keys import paused_key

KNOWN = "~known"
VERSION = "~version"


@dataclass(frozen=True)
class Mirror:
    """What the hash holds."""

    #: queue name -> paused_at (epoch ms); ``None`` when the hash is not
    #: known to be whole (see the module docstring)
    paused: dict[str, int] | None
    #: its version ("" when it has none), for :func:`replace`
    version: str


@translated
def read(client: Client, prefix: str) -> Mirror:
    """The hash as it is now."""
    fields = {_text(k): _text(v) for k, v in client.hgetall(paused_key(prefix)).items()}
    version = fields.pop(VERSION, "")
    if fields.pop(KNOWN, None) is None:
        return Mirror(None, version)
    return Mirror({name: int(at) for name, at in fields.items()}, version)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def pause(client: Client, prefix: str, queue: str, paused_at_ms: int) -> None:
    """Mark ``queue`` paused (after its row committed)."""
    keys = (paused_key(prefix),)
    scripts.load("paused")(client, keys, ("pause", queue, paused_at_ms))


def resume(client: Client, prefix: str, queue: str) -> None:
    """Mark ``queue`` running again (after its row was deleted)."""
    scripts.load("paused")(client, (paused_key(prefix),), ("resume", queue))


def replace(
    client: Client, prefix: str, version: str, paused: Mapping[str, int]
) -> bool:
    """Write the hash whole from the rows, read after the hash's ``version``
    was; ``False`` (nothing written) if a pause or resume wrote it since."""
    args: list[str | int] = ["mirror", version]
    for name, at in sorted(paused.items()):
        args += [name, at]
    return bool(scripts.load("paused")(client, (paused_key(prefix),), args))
