"""The key that says which project a ``KEY_PREFIX`` belongs to on a Redis."""

from __future__ import annotations

import redis

from .broken import is_wrong_type, replace_wrong_types
from .connection import Client
from .errors import translated


def owner_key(prefix: str) -> str:
    return f"{prefix}:owner"


@translated
def claim_prefix(client: Client, prefix: str, fingerprint: str) -> str:
    """Claim ``prefix`` for ``fingerprint`` unless it is claimed already;
    return the fingerprint that owns it now (ours, or another project's).

    SET NX and GET in one round trip: a pipeline of one key's commands, which
    a Redis Cluster serves from that key's node.
    """
    key = owner_key(prefix)
    pipe = client.pipeline(transaction=False)
    pipe.set(key, fingerprint, nx=True)
    pipe.get(key)
    _, owner = pipe.execute(raise_on_error=False)
    if isinstance(owner, redis.ResponseError) and is_wrong_type(owner):
        # Not a fingerprint at all (a list set by hand?): logged, deleted,
        # and claimed, rather than failing every loop with WRONGTYPE.
        replace_wrong_types(client, {key: "string"})
        return claim_prefix(client, prefix, fingerprint)
    if isinstance(owner, Exception):
        raise owner
    if owner is None:  # deleted between the two commands: ours to take again
        return fingerprint
    return owner.decode() if isinstance(owner, bytes) else str(owner)
