"""The Redis side of flow control: one script, ``lua/limits.lua``, run on a
queue's limits shard for each thing that changes a limit's state.

Who calls what:

- the dispatcher, :func:`admit`: places the due tasks it described in their
  groups' waiting lines, and admits what the limits allow;
- a worker, :func:`confirm` just before it claims what it read (each
  delivery still holds its slots, or goes back to wait), :func:`started`
  for the functions that started (the moments a rate limit counts),
  :func:`renew` on its heartbeat, :func:`release` when attempts end (which
  admits the next tasks at once: the release is the wake-up);
- the rebuild after a loss, :func:`restore`: the running rows' slots;
- status and metrics, :func:`usage`.

``table`` is every limit rule the caller knows, as :func:`rule_arguments`
spells it, so that the script judges by the rules of the code deployed,
not of the code that scheduled the task.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..conf.limits import Rule
from . import scripts
from .connection import Client
from .errors import translated
from .keys import ShardKeys

#: Milliseconds a concurrency slot lives without its worker renewing it:
#: how soon the slot of a worker that was killed or froze comes back.
LEASE_MS = 4000

#: Seconds between a worker's renewals of the slots it holds.
RENEW_EVERY = 1.0

#: Most tasks one script call admits.
ADMIT_BATCH = 500

#: The order of waiting tasks: priority first (higher first), then due time.
ORDER = 10_000_000_000_000


def order_score(priority: int, due_ms: int) -> int:
    return (100 - priority) * ORDER + due_ms


def rule_arguments(rules: Mapping[str, Rule]) -> list[scripts.ArgT]:
    """``{class: Rule}`` as the script's rule arguments."""
    argv: list[scripts.ArgT] = [len(rules)]
    for name, rule in rules.items():
        rate = rule.rate
        argv += (
            name,
            rule.concurrency or 0,
            0 if rate is None else rate.count,
            0 if rate is None else rate.period_ms,
        )
    return argv


def _call(
    keys: ShardKeys,
    op: str,
    rules: Mapping[str, Rule],
    args: Sequence[scripts.ArgT],
    most: int,
) -> scripts.Call:
    return (
        scripts.load("limits"),
        [keys.due_hi, keys.due, keys.due_lo, keys.ready, keys.epoch, keys.wake],
        [op, keys.base, LEASE_MS, most, *rule_arguments(rules), *args],
    )


def _run(
    client: Client,
    keys: ShardKeys,
    op: str,
    rules: Mapping[str, Rule],
    args: Sequence[scripts.ArgT],
    *,
    most: int = ADMIT_BATCH,
) -> tuple[object, bool]:
    script, script_keys, argv = _call(keys, op, rules, args, most)
    return script.run(client, script_keys, argv)


@dataclass
class Admitted:
    """What one :func:`admit` call did."""

    admitted: int
    #: earliest due time or limit timer left, epoch ms on Redis' clock; -1: none
    head: int
    redis_ms: int
    redis_us: int
    marked: bool
    reloaded: bool
    #: ids placed by this call that wait for a limit
    throttled: list[uuid.UUID] = field(default_factory=list)
    #: ids due and not yet placed: the caller describes them next
    due: list[uuid.UUID] = field(default_factory=list)


@dataclass(frozen=True)
class Placement:
    task_id: uuid.UUID
    group: str
    priority: int
    due_ms: int


@translated
def admit(
    client: Client,
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    placements: Sequence[Placement] = (),
    dropped: Sequence[uuid.UUID] = (),
    *,
    most: int = ADMIT_BATCH,
) -> Admitted:
    """Place ``placements`` in their groups' lines (out of the due-sets),
    drop ``dropped`` from the due-sets, and admit what the limits allow."""
    args: list[scripts.ArgT] = [len(placements)]
    for p in placements:
        args += (p.task_id.bytes, p.group, order_score(p.priority, p.due_ms))
    args.append(len(dropped))
    args += [task_id.bytes for task_id in dropped]
    reply, reloaded = _run(client, keys, "admit", rules, args, most=most)
    assert isinstance(reply, list)
    admitted, head, now, now_us, marked, n_throttled = (int(x) for x in reply[:6])
    rest = reply[6:]
    return Admitted(
        admitted,
        head,
        now,
        now_us,
        bool(marked),
        reloaded,
        [uuid.UUID(bytes=bytes(m)) for m in rest[:n_throttled]],
        [uuid.UUID(bytes=bytes(m)) for m in rest[n_throttled:] if len(m) == 16],
    )


@translated
def confirm(
    client: Client,
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    deliveries: Sequence[tuple[str, uuid.UUID]],
) -> list[bool]:
    """For each ``(entry id, task id)`` about to be claimed: whether it
    still holds its slots (and starts now); those that do not were put back
    to wait for admission, and their entries are the caller's to drop."""
    if not deliveries:
        return []
    args: list[scripts.ArgT] = []
    for entry_id, task_id in deliveries:
        args += (entry_id, task_id.bytes)
    # What it admits is bounded by what it sends back to wait.
    reply, _ = _run(client, keys, "confirm", rules, args, most=len(deliveries))
    assert isinstance(reply, list)
    return [bool(int(x)) for x in reply]


def release_call(
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    entries: Iterable[tuple[str, int | None]],
) -> scripts.Call | None:
    """The script call that frees the slots of deliveries ``(entry id, when
    its function started in epoch ms, or None if it did not)`` whose
    attempt ended, and admits what now fits; for a worker to send with its
    acknowledgement (same slot), or through :func:`release`."""
    args: list[scripts.ArgT] = []
    for entry_id, started_ms in entries:
        args += (entry_id, -1 if started_ms is None else started_ms)
    if not args:
        return None
    # A release admits about as many as it frees: the dispatcher admits
    # the rest, so that a worker's outcome does not wait on a long script.
    return _call(keys, "release", rules, args, len(args) // 2)


@translated
def release(
    client: Client,
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    entries: Iterable[tuple[str, int | None]],
) -> int:
    """:func:`release_call`, sent; how many it admitted."""
    call = release_call(keys, rules, entries)
    if call is None:
        return 0
    script, script_keys, argv = call
    return int(str(script.run(client, script_keys, argv)[0]))


@translated
def started(
    client: Client,
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    starts: Iterable[tuple[str, int]],
) -> int:
    """Say when the functions of deliveries ``(entry id, epoch ms)`` started."""
    args: list[scripts.ArgT] = []
    for entry_id, started_ms in starts:
        args += (entry_id, started_ms)
    if not args:
        return 0
    reply, _ = _run(client, keys, "started", rules, args, most=len(args) // 2)
    return int(str(reply))


@translated
def renew(
    client: Client, keys: ShardKeys, rules: Mapping[str, Rule], entries: Iterable[str]
) -> int:
    entry_ids = list(entries)
    if not entry_ids:
        return 0
    reply, _ = _run(client, keys, "renew", rules, entry_ids)
    return int(str(reply))


@translated
def restore(
    client: Client,
    keys: ShardKeys,
    rules: Mapping[str, Rule],
    attempts: Sequence[tuple[str, str, int, bool]],
) -> None:
    """After Redis lost them, take again the slots and starts of attempts
    ``(entry id, group, started ms, running)``: the slots of those that
    run, the starts of all (those that ended count in the rate windows of
    their period)."""
    for start in range(0, len(attempts), 500):
        args: list[scripts.ArgT] = []
        for entry_id, group, started_ms, running in attempts[start : start + 500]:
            args += (entry_id, group, started_ms, 1 if running else 0)
        _run(client, keys, "restore", rules, args)


@translated
def holding(client: Client, shards: Sequence[ShardKeys]) -> list[ShardKeys]:
    """Those of the limits ``shards`` that still index tasks (due, waiting,
    or delivered): one round trip."""
    if not shards:
        return []
    pipe = client.pipeline(transaction=False)
    for keys in shards:
        pipe.exists(*keys.due_bands)
        pipe.exists(keys.ready)
        pipe.exists(f"{keys.base}:gstate")
    replies = pipe.execute()
    return [
        keys
        for at, keys in enumerate(shards)
        if any(int(reply) for reply in replies[at * 3 : at * 3 + 3])
    ]


@dataclass
class LimitUse:
    """One limit class on one queue, now."""

    running: int = 0
    waiting: int = 0
    #: keys (``limit_by`` values) with tasks waiting
    keys_waiting: int = 0
    admitted: int = 0
    throttled: int = 0
    waited_ms: int = 0


@translated
def usage(
    client: Client, keys: ShardKeys, most_groups: int = 10_000
) -> dict[str, LimitUse]:
    """Each limit class's use on this queue (``"queue"`` or ``"task:<name>"``)."""
    reply, _ = _run(client, keys, "usage", {}, [most_groups])
    assert isinstance(reply, list)
    found: dict[str, LimitUse] = {}
    values = reply[1:]
    split = next(i for i, v in enumerate(values) if v in (b"--", "--"))
    for i in range(0, split, 4):
        name = _text(values[i])
        found[name] = LimitUse(
            int(values[i + 1]), int(values[i + 2]), int(values[i + 3])
        )
    stats = values[split + 1 :]
    for i in range(0, len(stats), 2):
        counter, _, name = _text(stats[i]).partition("|")
        use = found.setdefault(name, LimitUse())
        if hasattr(use, counter):
            setattr(use, counter, int(stats[i + 1]))
    return found


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
