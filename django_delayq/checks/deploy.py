"""Deployment checks (``manage.py check --deploy``): ``delayq.E017`` and
``delayq.W002``-``W007``.

What a production review of the Redis behind django-delayq would flag. The
warnings stop nothing: the rows are the truth and the sweeper repairs Redis,
but each of these makes a task late, or Redis open to the network. The two
that ask Redis itself cannot be made when it does not answer or refuses
``CONFIG``: ``W007`` says so, rather than passing in silence. A test mode
left on is an error: tasks would run in the web process, or not at all.
See docs/reference/checks.md.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning

from .. import conf, registry
from ..conf import check_ids
from ..exceptions import InvalidConfiguration, RedisUnavailable

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def check_deployment(**kwargs: Any) -> list[CheckMessage]:
    try:
        settings = conf.parse(conf.raw_settings())
    except InvalidConfiguration:
        return []  # check_settings reports it
    return [
        *_test_mode_errors(settings),
        *_url_warnings(settings),
        *_time_limit_warnings(settings),
        # With DEBUG on, a TEST_MODE is a test settings module's, whose Redis
        # (if any) nothing uses: there is no production server to ask.
        *(
            _server_warnings()
            if settings.test_mode is None or not django_settings.DEBUG
            else []
        ),
    ]


def _test_mode_errors(settings: conf.Settings) -> list[CheckMessage]:
    """A test mode in settings that deploy with DEBUG off.

    Django's test runner turns DEBUG off for every test run, but deploy
    checks run only when asked (``check --deploy``): what they see with
    DEBUG off is production settings.
    """
    if settings.test_mode is None or django_settings.DEBUG:
        return []
    effect = (
        "every schedule() runs its task at once, inside the web process, "
        "whatever its delay"
        if settings.test_mode == "immediate"
        else "nothing is written to Redis, and delayq_dispatch, delayq_worker "
        "and delayq_sweep refuse to start: no task runs"
    )
    return [
        Error(
            f'DELAYQ["TEST_MODE"] is {settings.test_mode!r} with DEBUG off: {effect}.',
            hint='Remove "TEST_MODE" from the production settings; set it in '
            "the test settings only (or use django_delayq.testing.test_mode() "
            "in the tests).",
            id=check_ids.TEST_MODE_DEPLOYED,
        )
    ]


def _time_limit_warnings(settings: conf.Settings) -> list[CheckMessage]:
    """Time limits longer than the visibility timeout.

    A worker heartbeats the entries it holds from a thread of its own; if it
    stops (the process is paused, or a task holds the GIL in C code), the
    entry of a task still running within its time limit is taken over after
    VISIBILITY_TIMEOUT and the task runs a second time, concurrently, before
    its own limit would have stopped the first run.
    """
    timeout = settings.visibility_timeout
    limits: list[tuple[str, float]] = []
    if settings.time_limit is not None:
        limits.append(('DELAYQ["TIME_LIMIT"]', settings.time_limit))
    for name, registered in sorted(registry.all_tasks().items()):
        if registered.time_limit is not None:
            limits.append((f"task {name!r}'s time_limit", registered.time_limit))
    return [
        Warning(
            f'DELAYQ["VISIBILITY_TIMEOUT"] ({timeout:g} s) is shorter than '
            f"{what} ({limit:g} s): if its worker stops heartbeating while such "
            f"a task runs (a paused process, a task holding the GIL), another "
            f"worker takes the task over and runs it again before the limit "
            f"stops the first run.",
            hint=f'Raise DELAYQ["VISIBILITY_TIMEOUT"] above {limit:g} s, or '
            f"lower the time limit.",
            id=check_ids.VISIBILITY_BELOW_TIME_LIMIT,
        )
        for what, limit in limits
        if limit > timeout
    ]


def _url_warnings(settings: conf.Settings) -> list[CheckMessage]:
    warnings: list[CheckMessage] = []
    if settings.sentinel is not None:
        sentinel = settings.sentinel
        remote = sorted({host for host, _ in sentinel.nodes} - _LOOPBACK)
        if remote and not sentinel.ssl:
            warnings.append(
                Warning(
                    f'DELAYQ["REDIS_SENTINEL"] reaches {", ".join(remote)} without '
                    f"TLS: task ids, and the passwords, cross the network "
                    f"unencrypted.",
                    hint='Set "SSL": True (with "SSL_CA_CERTS" for a private CA) '
                    "and serve TLS on the sentinels and the Redis servers.",
                    id=check_ids.REDIS_PLAINTEXT,
                )
            )
        elif sentinel.ssl and sentinel.ssl_cert_reqs == "none":
            warnings.append(
                Warning(
                    'DELAYQ["REDIS_SENTINEL"]["SSL_CERT_REQS"] is "none": the '
                    "servers' certificates are not verified, so anyone on the "
                    "path can pose as Redis.",
                    hint='Use "required" (the default), with "SSL_CA_CERTS" '
                    "naming the CA that signed the servers' certificates.",
                    id=check_ids.REDIS_PLAINTEXT,
                )
            )
        if not sentinel.password:
            warnings.append(_no_password('DELAYQ["REDIS_SENTINEL"] has no PASSWORD'))
        return warnings
    if settings.redis_url is None:
        return warnings  # CACHE_ALIAS: the cache's own settings
    parts = urlsplit(settings.redis_url)
    if parts.scheme == "unix":
        return warnings
    host = parts.hostname or ""
    if parts.scheme == "redis" and host not in _LOOPBACK:
        warnings.append(
            Warning(
                f'DELAYQ["REDIS_URL"] reaches {host} over plaintext redis://: '
                f"task ids, and the password if any, cross the network unencrypted.",
                hint='Use "rediss://" (TLS) for a Redis on another host.',
                id=check_ids.REDIS_PLAINTEXT,
            )
        )
    if not parts.password:
        warnings.append(_no_password('DELAYQ["REDIS_URL"] has no password'))
    return warnings


def _no_password(what: str) -> CheckMessage:
    return Warning(
        f"{what}: anyone who reaches this Redis can read, cancel or run tasks "
        f"by writing their ids.",
        hint='Set "requirepass" (or an ACL user) on Redis and put the '
        "password in the URL (or REDIS_SENTINEL's PASSWORD).",
        id=check_ids.REDIS_NO_PASSWORD,
    )


def _server_warnings() -> list[CheckMessage]:
    from ..store.connection import get_client
    from ..store.errors import error_text
    from ..store.inspect import server_config

    try:
        config = server_config(get_client(), ["maxmemory-policy", "save", "appendonly"])
    except RedisUnavailable as exc:
        return [_server_not_checked(f"Redis does not answer ({error_text(exc)})")]
    if not config:
        return [_server_not_checked("Redis refuses CONFIG GET")]
    warnings: list[CheckMessage] = []
    policy = config.get("maxmemory-policy")
    if policy is not None and policy != "noeviction":
        warnings.append(
            Warning(
                f"Redis evicts keys when it is full (maxmemory-policy {policy}): "
                f"an evicted due-set or stream is found missing only by the "
                f"sweeper, so its tasks run up to a sweep interval late.",
                hint="Set maxmemory-policy noeviction (a full Redis then "
                "refuses writes, which the outbox absorbs), and keep enough "
                "memory for the backlog.",
                id=check_ids.REDIS_EVICTS,
            )
        )
    if config.get("save") == "" and config.get("appendonly") == "no":
        warnings.append(
            Warning(
                "Redis keeps nothing on disk (no RDB snapshots, no AOF): after "
                "a restart the dispatchers rebuild the index from the rows, and "
                "the tasks due meanwhile run late by the restart and the "
                "rebuild (seconds); a task that was running when its worker "
                "died too waits for its visibility timeout.",
                hint="Enable appendonly yes (AOF, everysec), or RDB snapshots.",
                id=check_ids.REDIS_NOT_PERSISTENT,
            )
        )
    return warnings


def _server_not_checked(why: str) -> CheckMessage:
    return Warning(
        f"Could not check Redis' eviction policy and persistence "
        f"({check_ids.REDIS_EVICTS}, {check_ids.REDIS_NOT_PERSISTENT}): {why}.",
        hint="Run `manage.py check --deploy` where the production Redis "
        "answers, or check maxmemory-policy noeviction and appendonly yes on "
        "the server yourself (a managed service shows them in its console); "
        f"then silence {check_ids.REDIS_NOT_CHECKED} in SILENCED_SYSTEM_CHECKS "
        "if CONFIG stays refused.",
        id=check_ids.REDIS_NOT_CHECKED,
    )
