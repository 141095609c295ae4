"""Validation and encoding of task arguments (and metadata, and return values).

Arguments are stored as JSON, never pickled. The value is walked here
instead of trusting ``json.dumps``: it would silently turn tuple keys into
errors but int keys into strings, and accept NaN, so the task would receive
something other than what the caller passed. The error names the exact place.

The walk also gives the value the form PostgreSQL's jsonb stores (see
:func:`_as_jsonb_keeps` and :func:`_jsonb_key_order`), on every database:
what ``schedule()`` returns is then what any database gives back, and what
the task receives (docs/guide/scheduling.md, "Arguments").
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

from .exceptions import (
    InvalidPayload,
    PayloadTooLarge,
    ResultTooLarge,
    UnsupportedPayloadType,
)
from .text import check_text

_MAX_DEPTH = 64
_HINTS = {
    "datetime": "pass value.isoformat() and parse it in the task",
    "date": "pass value.isoformat() and parse it in the task",
    "Decimal": "pass str(value)",
    "UUID": "pass str(value)",
    "set": "pass a sorted list",
    "frozenset": "pass a sorted list",
    "bytes": "pass a str (e.g. base64) instead",
}


def check_payload(
    args: Any, kwargs: Any, *, max_bytes: int
) -> tuple[list[Any], dict[str, Any]]:
    """Validate ``args`` and ``kwargs``; return them as JSON-ready list and dict.

    An oversize payload is refused as soon as the walk has seen more text
    than the limit allows, before the rest is checked or anything encoded.
    """
    if isinstance(args, str | bytes) or not isinstance(args, list | tuple):
        raise unsupported(
            args,
            f"args= must be a list or tuple of positional arguments, not "
            f"{type(args).__name__}; for one argument write args=[value].",
        )
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise unsupported(
            kwargs,
            f"kwargs= must be a dict of keyword arguments, not "
            f"{type(kwargs).__name__}.",
        )
    budget = _Budget(
        max_bytes,
        "args and kwargs encode",
        'the DELAYQ["MAX_PAYLOAD_BYTES"] limit',
        _PAYLOAD_ADVICE,
    )
    for key in kwargs:
        if not isinstance(key, str):
            raise unsupported(
                key, f"kwargs= keys must be strings (argument names); got {key!r}."
            )
        check_text(key, f"the kwargs= key {key!r}", InvalidPayload)
    clean_args = [_check(v, f"args[{i}]", 0, budget) for i, v in enumerate(args)]
    clean_kwargs = dict(
        sorted(
            ((k, _check(v, f"kwargs[{k!r}]", 0, budget)) for k, v in kwargs.items()),
            key=_jsonb_key_order,
        )
    )
    # No kwargs is the common case: "{}", not worth encoding.
    budget.check(
        encoded_size(clean_args) + (encoded_size(clean_kwargs) if clean_kwargs else 2)
    )
    return clean_args, clean_kwargs


def check_value(value: Any, where: str, *, max_bytes: int | None = None) -> Any:
    """Return ``value`` as plain JSON data, or raise :class:`InvalidPayload`
    (:class:`ResultTooLarge` past ``max_bytes`` of JSON, for a return value)."""
    if max_bytes is None:
        return _check(value, where, 0, None)
    budget = _Budget(
        max_bytes,
        f"{where} encodes",
        'the DELAYQ["MAX_RESULT_BYTES"] limit',
        _RESULT_ADVICE,
        ResultTooLarge,
    )
    clean = _check(value, where, 0, budget)
    budget.check(encoded_size(clean))
    return clean


#: The most a task's metadata may encode to, in bytes of JSON. Metadata
#: names things (a tenant, a request id, a trace parent) and is read by
#: every run's middleware: it is kept small, and data goes in arguments.
MAX_META_BYTES = 4096


def check_meta(meta: Any) -> dict[str, Any]:
    """Validate a task's metadata (``meta=``); return it as a JSON-ready dict,
    ``{}`` for None.

    A dict with string keys and JSON values, as ``kwargs`` but with a fixed
    limit of :data:`MAX_META_BYTES`: :class:`UnsupportedPayloadType` for a
    type JSON cannot hold, :class:`InvalidPayload` for other bad values and
    :class:`PayloadTooLarge` past the limit, each naming the place.
    """
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise unsupported(
            meta,
            f"meta= must be a dict of metadata (str keys, JSON values), not "
            f"{type(meta).__name__}; for example meta={{'tenant': 'acme'}}.",
        )
    if not meta:
        return {}
    budget = _Budget(
        MAX_META_BYTES, "meta= encodes", "the metadata limit", _META_ADVICE
    )
    clean: dict[str, Any] = _check(meta, "meta", 0, budget)
    budget.check(encoded_size(clean))
    return clean


_PAYLOAD_ADVICE = "Pass ids and load the data in the task, or raise the limit."
_RESULT_ADVICE = (
    "Return an id or a summary and keep the data in your own table, or raise the limit."
)
_META_ADVICE = (
    "Keep short ids and names in meta= (a tenant, a request id); pass data as "
    "the task's arguments."
)


class _Budget:
    """What a value may still encode to, counted from below while walking it.

    Each string counts its characters plus its quotes and each other value
    one byte: never more than its JSON, so running out proves the value is
    too large without encoding it.
    """

    __slots__ = ("advice", "error", "left", "limit", "limit_name", "what")

    def __init__(
        self,
        limit: int,
        what: str,
        limit_name: str,
        advice: str,
        error: type[InvalidPayload] = PayloadTooLarge,
    ) -> None:
        self.limit, self.left = limit, limit
        self.what, self.limit_name, self.advice = what, limit_name, advice
        self.error = error

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            self._refuse(f"more than {self.limit} bytes")

    def check(self, size: int) -> None:
        if size > self.limit:
            self._refuse(f"{size} bytes")

    def _refuse(self, size: str) -> None:
        raise self.error(
            f"{self.what} to {size} of JSON, over {self.limit_name} of "
            f"{self.limit}. {self.advice}"
        )


#: One encoder for every call: ``json.dumps()`` with options builds a new one
#: each time, which dominates the cost for the small payloads tasks carry.
encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encoded_size(value: Any) -> int:
    text = encode_json(value)
    return len(text) if text.isascii() else len(text.encode())


def _as_jsonb_keeps(value: float) -> float | int:
    """``value`` as PostgreSQL's jsonb gives it back: its numbers are
    decimals, without a negative zero, and one written with a positive
    exponent (``1e+16``, as ``json`` writes large floats) has no fractional
    part, so it reads back as an int (of the decimal written, not of the
    float's binary value: ``1e23`` is ``10**23``)."""
    if value == 0.0:
        return 0.0
    text = repr(value)
    if "e+" in text:
        return int(decimal.Decimal(text))
    return value


def _jsonb_key_order(item: tuple[str, Any]) -> tuple[int, bytes]:
    key = item[0].encode()
    return len(key), key


def _check(value: Any, where: str, depth: int, budget: _Budget | None) -> Any:
    if depth > _MAX_DEPTH:
        raise InvalidPayload(f"{where} is nested more than {_MAX_DEPTH} levels deep.")
    if budget is not None:
        budget.spend(len(value) + 2 if isinstance(value, str) else 1)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return check_text(value, where, InvalidPayload)
    if isinstance(value, int):
        return int(value)  # IntEnum and friends become plain ints
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidPayload(
                f"{where} is {value!r}, which JSON cannot represent; pass None "
                f"or a string."
            )
        return _as_jsonb_keeps(float(value))
    if isinstance(value, list | tuple):
        return [
            _check(v, f"{where}[{i}]", depth + 1, budget) for i, v in enumerate(value)
        ]
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise unsupported(
                    key,
                    f"{where} has the key {key!r} ({type(key).__name__}); JSON "
                    f"object keys must be strings, so convert it with str().",
                )
            check_text(key, f"{where} key {key!r}", InvalidPayload)
            if budget is not None:
                budget.spend(len(key) + 3)  # its quotes and the colon
            out[key] = _check(item, f"{where}[{key!r}]", depth + 1, budget)
        if len(out) > 1:
            # jsonb's own order: shorter keys first (in UTF-8 bytes), then
            # bytewise.
            out = dict(sorted(out.items(), key=_jsonb_key_order))
        return out
    kind = type(value).__name__
    hint = _HINTS.get(kind, "pass plain data: ids, strings, numbers, lists, dicts")
    article = "an" if kind[:1].lower() in "aeio" else "a"  # "a UUID"
    raise unsupported(
        value,
        f"{where} is {article} {kind}, which is not JSON serializable; {hint}.",
    )


def unsupported(value: object, text: str) -> UnsupportedPayloadType:
    """The error for a ``value`` of a type JSON cannot hold: ``text`` first,
    the place and the fix in plain words, then Django's words for it
    (``Unsupported type: <class '...'>``), which code written for its Tasks
    backends looks for anywhere in the message, as Django's own tests do."""
    return UnsupportedPayloadType(f"{text} (Unsupported type: {type(value)})")
