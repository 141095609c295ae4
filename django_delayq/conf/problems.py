"""Everything wrong with a ``DELAYQ`` value, as :class:`Problem` records.

The system checks report them; :func:`django_delayq.conf.parse` raises the
first error. One validator for both, so ``manage.py check`` and a runtime
error always say the same thing.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ..text import short_repr
from . import check_ids
from .limits import concurrency_problem, rate_problem
from .redis_settings import connection_problems
from .schema import (
    DEFAULTS,
    KEY_PREFIX_PATTERN,
    MAX_SHARDS,
    MAX_TIME_LIMIT,
    QUEUE_KEYS,
    QUEUE_NAME,
    Problem,
    is_int,
    is_number,
    is_test_mode,
)


def find_problems(raw: Any) -> list[Problem]:
    """Return everything wrong with a ``DELAYQ`` value (empty when it is valid)."""
    example = "DELAYQ = {'REDIS_URL': 'redis://127.0.0.1:6379/0'}"
    if raw is None:
        return [
            Problem(
                check_ids.CONNECTION,
                "settings.DELAYQ is not set, so django-delayq has no Redis connection.",
                f"Add {example}, or point CACHE_ALIAS at a django-redis cache.",
            )
        ]
    if not isinstance(raw, Mapping):
        return [
            Problem(
                check_ids.NOT_A_DICT,
                f"settings.DELAYQ must be a dict, not {type(raw).__name__}.",
                f"Use {example}.",
            )
        ]
    problems = [*_unknown_keys(raw), *connection_problems(raw)]
    problems += _queue_problems(raw.get("QUEUES", DEFAULTS["QUEUES"]))
    problems += _number_problems(raw)
    problems += _middleware_problems(raw.get("MIDDLEWARE", DEFAULTS["MIDDLEWARE"]))
    mode = raw.get("TEST_MODE", DEFAULTS["TEST_MODE"])
    if mode is not None and not is_test_mode(mode):
        problems.append(
            Problem(
                check_ids.TEST_MODE,
                f'DELAYQ["TEST_MODE"] must be None, "manual", "immediate" or the '
                f"dotted path of an indexer class; got {short_repr(mode)}.",
                'Set "TEST_MODE": "manual" in your test settings (tasks run '
                'when a test calls run_due()), "immediate" (each task runs '
                "when its transaction commits), or remove it in production.",
            )
        )
    for key, example in (("KEY_PREFIX", "delayq"), ("TEST_KEY_PREFIX", "test_delayq")):
        prefix = raw.get(key, DEFAULTS[key])
        if key == "TEST_KEY_PREFIX" and prefix is None:
            continue
        # A prefix wrong only by its colons is told why they are refused.
        if not isinstance(prefix, str) or not KEY_PREFIX_PATTERN.match(
            prefix.replace(":", "-")
        ):
            problems.append(
                Problem(
                    check_ids.KEY_PREFIX,
                    f'DELAYQ["{key}"] must be 1-64 characters of letters, '
                    f"digits and _.- (no braces: they mark Redis Cluster hash "
                    f"tags); got {short_repr(prefix)}.",
                    f'Use e.g. "{key}": "{example}".',
                )
            )
        elif ":" in prefix:
            problems.append(_nested_prefix(key, prefix))
    return problems


def _nested_prefix(key: str, prefix: str) -> Problem:
    outer = prefix.partition(":")[0]
    fixed = prefix.replace(":", "-")
    return Problem(
        check_ids.KEY_PREFIX,
        f'DELAYQ["{key}"] must not contain ":"; got {short_repr(prefix)}. Every '
        f'key is named "<prefix>:...", so the keys of {prefix!r} are also keys '
        f"of the prefix {outer!r}: a Redis ACL key pattern such as ~{outer}:* "
        f"would give that project's user this one's keys, and the other way "
        f"round.",
        f'Use "-" or "_" instead, e.g. "{key}": "{fixed}". Scheduled tasks '
        f"are indexed again under the new prefix from their rows, as after a "
        f"Redis data loss; the old prefix's keys can then be deleted.",
    )


def _unknown_keys(raw: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for key in raw:
        if key in DEFAULTS:
            continue
        close = difflib.get_close_matches(str(key), DEFAULTS, n=1)
        hint = (
            f"Did you mean {close[0]!r}?"
            if close
            else f"Known keys: {', '.join(DEFAULTS)}."
        )
        problems.append(
            Problem(
                check_ids.UNKNOWN_SETTING,
                f"settings.DELAYQ has an unknown key {short_repr(key)}; it is ignored.",
                hint,
                error=False,
            )
        )
    return problems


def _queue_problems(queues: Any) -> list[Problem]:
    hint = 'For example "QUEUES": {"orders": {"shards": 4}}.'
    if not isinstance(queues, Mapping):
        return [
            Problem(
                check_ids.QUEUES,
                f'DELAYQ["QUEUES"] must be a dict of queue name to options, '
                f"not {type(queues).__name__}.",
                hint,
            )
        ]
    problems = []
    for name, options in queues.items():
        where = f'DELAYQ["QUEUES"][{short_repr(name)}]'
        if not isinstance(name, str) or not QUEUE_NAME.match(name):
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f"{where}: a queue name must be 1-64 letters, digits or "
                    f"_.- characters.",
                    hint,
                )
            )
            continue
        if not isinstance(options, Mapping):
            problems.append(
                Problem(check_ids.QUEUES, f"{where} must be a dict of options.", hint)
            )
            continue
        unknown = set(options) - QUEUE_KEYS
        if unknown:
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f"{where} has unknown option(s) {sorted(map(str, unknown))}.",
                    f"Known options: {', '.join(sorted(QUEUE_KEYS))}.",
                )
            )
        shards = options.get("shards", 1)
        if not is_int(shards) or not 1 <= shards <= MAX_SHARDS:
            problems.append(
                Problem(
                    check_ids.QUEUES,
                    f'{where}["shards"] must be an integer from 1 to '
                    f"{MAX_SHARDS}; got {short_repr(shards)}.",
                    hint,
                )
            )
        for problem in (
            concurrency_problem(
                options.get("concurrency_limit"), f'{where}["concurrency_limit"]'
            ),
            rate_problem(options.get("rate_limit"), f'{where}["rate_limit"]'),
        ):
            if problem is not None:
                problems.append(
                    Problem(
                        check_ids.QUEUES,
                        problem,
                        'For example "QUEUES": {"payments": {"concurrency_limit": '
                        '20, "rate_limit": "100/s"}}.',
                    )
                )
    return problems


def _middleware_problems(value: Any) -> list[Problem]:
    """The shape of ``MIDDLEWARE``; whether each entry imports is
    ``checks.config.check_middleware``'s (settings are read before the
    project's modules can be imported)."""
    if isinstance(value, list | tuple) and all(
        isinstance(path, str) and "." in path for path in value
    ):
        return []
    return [
        Problem(
            check_ids.MIDDLEWARE,
            f'DELAYQ["MIDDLEWARE"] must be a list of dotted paths of middleware '
            f"classes; got {short_repr(value)}.",
            'For example "MIDDLEWARE": ["shop.tasks.TenantMiddleware"].',
        )
    ]


def _number_problems(raw: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for key, low, high, integer in (
        ("MAX_PAYLOAD_BYTES", 1, 64 * 1024 * 1024, True),
        ("MAX_RESULT_BYTES", 1, 64 * 1024 * 1024, True),
        ("MAX_ATTEMPTS", 1, 1000, True),  # options.MAX_ATTEMPTS_LIMIT
        ("REDIS_TIMEOUT", 0.001, 60.0, False),
        ("RETRY_BACKOFF", 0.0, 86400.0, False),
        ("RETRY_BACKOFF_MAX", 0.0, 30 * 86400.0, False),
        ("VISIBILITY_TIMEOUT", 1.0, 86400.0, False),
        ("RECONCILE_HORIZON", 0.0, 30 * 86400.0, False),
        ("RETAIN_SUCCEEDED", 0.0, 3650 * 86400.0, False),
        ("RETAIN_FAILED", 0.0, 3650 * 86400.0, False),
        ("TIME_LIMIT", 0.001, MAX_TIME_LIMIT, False),
        ("CANCEL_GRACE", 0.0, 86400.0, False),
    ):
        value = raw.get(key, DEFAULTS[key])
        if key == "TIME_LIMIT" and value is None:
            continue  # no limit
        valid_type = is_int(value) if integer else is_number(value)
        if not valid_type or not low <= value <= high:
            kind = "an integer" if integer else "a number of seconds"
            problems.append(
                Problem(
                    check_ids.NUMBER,
                    f'DELAYQ["{key}"] must be {kind} from {low} to {high}; '
                    f"got {short_repr(value)}.",
                    f"Remove it to use the default ({DEFAULTS[key]!r}).",
                )
            )
    return problems
