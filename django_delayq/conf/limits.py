"""The limits a task or a queue declares, parsed and validated.

``concurrency_limit=N``: at most N running at once. ``rate_limit="N/s"``
(also ``"N/m"``, ``"N/h"``): at most N starts in any window of that period.
``limit_by``: the name of one of the task's parameters, or a function of
the task's arguments returning a string; the task's limits then hold per
value of it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The most a concurrency or rate limit may allow (a sanity bound, far above
#: what one Redis slot admits).
MAX_LIMIT = 100_000

#: The periods a rate limit may count over, in milliseconds.
PERIODS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}

_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``period_ms``."""

    count: int
    period_ms: int

    def __str__(self) -> str:
        unit = {v: k for k, v in PERIODS_MS.items()}[self.period_ms]
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class Rule:
    """What one limit allows: ``concurrency`` running at once and/or
    ``rate`` starts per period (None: not limited that way)."""

    concurrency: int | None = None
    rate: Rate | None = None

    def __bool__(self) -> bool:
        return self.concurrency is not None or self.rate is not None

    def describe(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        if self.rate is not None:
            parts.append(f"{self.rate.count} per {_UNIT_NAMES[self.rate.period_ms]}")
        return ", ".join(parts)


#: The rule of what is not limited.
NO_LIMITS = Rule()

_UNIT_NAMES = {1000: "second", 60_000: "minute", 3_600_000: "hour"}


def concurrency_problem(value: object, where: str) -> str | None:
    """What is wrong with a ``concurrency_limit`` value; None if it is valid."""
    if value is None:
        return None
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_LIMIT
    ):
        return (
            f"{where} must be a whole number of tasks from 1 to {MAX_LIMIT}, or "
            f"None for no limit; got {value!r}."
        )
    return None


def parse_rate(value: object, where: str) -> Rate | None:
    """Parse a ``rate_limit`` value (``"100/s"``, ``"10/m"``, ``"500/h"``);
    raise ``ValueError`` naming ``where`` if it is not one."""
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or match[2] not in PERIODS_MS:
        raise ValueError(
            f'{where} must be a string "N/s", "N/m" or "N/h" (at most N '
            f"starts per second, minute or hour), or None for no limit; "
            f"got {value!r}."
        )
    count = int(match[1])
    if not 1 <= count <= MAX_LIMIT:
        raise ValueError(
            f"{where} must allow from 1 to {MAX_LIMIT} starts per period; got "
            f"{value!r}. To stop a task from running, do not schedule it."
        )
    return Rate(count, PERIODS_MS[match[2]])


def rate_problem(value: object, where: str) -> str | None:
    try:
        parse_rate(value, where)
    except ValueError as exc:
        return str(exc)
    return None


def limit_by_problem(value: object, where: str) -> str | None:
    """What is wrong with a ``limit_by`` value on its own (its fit to the
    function is :func:`key_function`'s); None if it is valid."""
    if value is None or callable(value):
        return None
    if isinstance(value, str) and value.isidentifier():
        return None
    return (
        f"{where} must name one of the task's parameters (a str) or be a "
        f"function of the task's arguments returning a str; got {value!r}."
    )


#: ``key_of(args, kwargs) -> str``: the limits' key of one call.
KeyFunction = Callable[[tuple[Any, ...], dict[str, Any]], str]


def key_function(
    func: Callable[..., Any], limit_by: str | Callable[..., Any], where: str
) -> KeyFunction:
    """How a call of ``func`` gives its limits' key, from ``limit_by``;
    raise ``TypeError`` naming ``where`` if ``limit_by`` does not fit
    ``func``'s signature."""
    signature = inspect.signature(func)
    if isinstance(limit_by, str):
        parameter = signature.parameters.get(limit_by)
        if parameter is None or parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            named = ", ".join(
                p.name
                for p in signature.parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            )
            raise TypeError(
                f"{where}: {func.__qualname__}() has no parameter named "
                f"{limit_by!r} (it has: {named or 'none'}). Name one of its "
                f"parameters, or pass a function of its arguments."
            )

        def by_parameter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return bound.arguments[limit_by]

        return by_parameter
    try:
        key_signature = inspect.signature(limit_by)
    except (TypeError, ValueError):  # a builtin without a signature
        key_signature = None
    if key_signature is not None and not _fits(signature, key_signature):
        raise TypeError(
            f"{where}: the key function {getattr(limit_by, '__qualname__', limit_by)}"
            f"{key_signature} cannot take every call of "
            f"{func.__qualname__}{signature}. Give it the task's parameters "
            f"(or *args, **kwargs)."
        )

    def by_function(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return limit_by(*args, **kwargs)

    return by_function


def _fits(task: inspect.Signature, key: inspect.Signature) -> bool:
    """Whether every call that fits ``task`` also fits ``key``: tried with
    the task's own parameters passed as the task's callers may pass them."""
    positional = [
        p
        for p in task.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    keyword_only = [p for p in task.parameters.values() if p.kind is p.KEYWORD_ONLY]
    try:
        key.bind(*positional, **{p.name: p for p in keyword_only})
        if any(p.kind is p.VAR_POSITIONAL for p in task.parameters.values()):
            key.bind(*positional, 1, 2, **{p.name: p for p in keyword_only})
    except TypeError:
        return False
    return True
