"""The least-privilege Redis ACL of django-delayq, as the Redis reference
documents it (``docs/reference/redis.md``, block ``redis-acl-setuser``): the tests
run the whole flow under a user made of exactly these words, and check that
the documented block says the same. With Redis Sentinel, the sentinels have
a user of their own (``docs/security.md``, block ``sentinel-acl-setuser``)."""

from __future__ import annotations

import redis

#: Every command (or subcommand) django-delayq sends, those its Lua scripts
#: call included (Redis checks a script's commands against the user's ACL).
COMMANDS = (
    # connecting
    "ping",
    "select",
    "client|setname",
    # scripts, and the commands they call
    "evalsha",
    "eval",
    "time",
    "type",
    "get",
    "set",
    "del",
    "pexpire",
    "pttl",
    "expire",
    "hincrby",
    "lpush",
    "ltrim",
    "zadd",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zcount",
    "xadd",
    "xack",
    "xdel",
    "xreadgroup",
    "hset",
    "hget",
    "hdel",
    "rpush",
    "lpop",
    "llen",
    "zscore",
    "hvals",
    "hkeys",
    # sent directly
    "exists",
    "blpop",
    "zcard",
    "zmscore",
    "hgetall",
    "xgroup|create",
    "xgroup|delconsumer",
    "xautoclaim",
    "xclaim",
    "xpending",
    "xrange",
    "xlen",
    "xinfo|groups",
    "xinfo|consumers",
)


def acl_rules(prefix: str, password: str = "CHANGE-ME") -> list[str]:
    """The rules after ``ACL SETUSER <user>`` for the key prefix ``prefix``."""
    return [
        "reset",
        "on",
        f">{password}",
        f"~{prefix}:*",
        *(f"+{command}" for command in COMMANDS),
    ]


def create_user(
    admin: redis.Redis,
    user: str,
    password: str,
    prefix: str,
    *,
    without: tuple[str, ...] = (),
) -> None:
    """Create ``user`` with the documented ACL, less the commands ``without``."""
    rules = [rule for rule in acl_rules(prefix, password) if rule[1:] not in without]
    admin.execute_command("ACL", "SETUSER", user, *rules)


#: What django-delayq's client asks a sentinel: the primaries it monitors
#: (redis-py finds the primary's address in ``SENTINEL MASTERS``).
SENTINEL_COMMANDS = ("sentinel|masters",)


def sentinel_acl_rules(password: str = "CHANGE-ME") -> list[str]:
    """The rules after ``ACL SETUSER <user>`` on each sentinel."""
    return ["reset", "on", f">{password}", *(f"+{c}" for c in SENTINEL_COMMANDS)]


def create_sentinel_user(admin: redis.Redis, user: str, password: str) -> None:
    """Create ``user`` on the sentinel ``admin`` is logged in to."""
    admin.execute_command("ACL", "SETUSER", user, *sentinel_acl_rules(password))
