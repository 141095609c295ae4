"""Each limit's use now, as ``delayq_status``, the metrics and the admin
show it: per queue and limit, the tasks running under it and waiting for
it, and what it admitted, throttled and made wait since Redis' data began.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..conf import get_settings
from ..conf.limits import Rule
from ..store import limits
from ..store.connection import Client
from ..store.keys import LIMITS_SHARD, shard_keys
from .groups import QUEUE, limited_queues, rules_of


@dataclass(frozen=True)
class LimitState:
    queue: str
    #: ``"queue"`` (the queue's own limits) or the task's name
    limit: str
    #: what it allows, e.g. "5 at once, 100 per second"
    rule: str
    concurrency: int | None
    rate: str | None
    running: int
    waiting: int
    #: ``limit_by`` values with tasks waiting
    keys_waiting: int
    admitted: int
    throttled: int
    waited_seconds: float


def limit_states(client: Client) -> list[LimitState]:
    """Every configured limit of every queue, with its use (zeros for one
    not used yet); raises ``RedisUnavailable``."""
    settings = get_settings()
    found = []
    for name in sorted(limited_queues()):
        rules = rules_of(settings.queue(name))
        keys = shard_keys(settings.key_prefix, name, LIMITS_SHARD)
        used = limits.usage(client, keys)
        for limit_class, rule in sorted(rules.items(), key=_queue_first):
            use = used.get(limit_class, limits.LimitUse())
            found.append(
                LimitState(
                    queue=name,
                    limit=_label(limit_class),
                    rule=rule.describe(),
                    concurrency=rule.concurrency,
                    rate=None if rule.rate is None else str(rule.rate),
                    running=use.running,
                    waiting=use.waiting,
                    keys_waiting=use.keys_waiting,
                    admitted=use.admitted,
                    throttled=use.throttled,
                    waited_seconds=use.waited_ms / 1000,
                )
            )
    return found


def _queue_first(item: tuple[str, Rule]) -> tuple[bool, str]:
    return (item[0] != QUEUE, item[0])


def _label(limit_class: str) -> str:
    return limit_class.removeprefix("task:")
