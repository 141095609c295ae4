"""Validation of how ``DELAYQ`` reaches Redis: ``REDIS_URL`` (also as a
cluster node), ``CACHE_ALIAS`` and ``REDIS_SENTINEL``; and URLs with their
credentials masked, for every message that shows one."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from django.conf import settings as django_settings

from ..text import short_repr
from . import check_ids
from .redis_urls import client_refusal
from .schema import (
    CONNECTION_KEYS,
    DJANGO_REDIS_CACHE,
    REDIS_SCHEMES,
    SENTINEL_CERT_REQS,
    SENTINEL_EXAMPLE,
    SENTINEL_KEYS,
    SENTINEL_TLS_FILES,
    Problem,
    is_int,
)


def connection_problems(raw: Mapping[Any, Any]) -> list[Problem]:
    url, alias = raw.get("REDIS_URL"), raw.get("CACHE_ALIAS")
    given = [key for key in CONNECTION_KEYS if raw.get(key) is not None]
    if len(given) != 1:
        state = f"{' and '.join(given)} are set" if given else "none is set"
        return [
            Problem(
                check_ids.CONNECTION,
                f'DELAYQ needs exactly one of "REDIS_URL", "CACHE_ALIAS" and '
                f'"REDIS_SENTINEL"; {state}.',
                'Set "REDIS_URL": "redis://host:6379/0", "CACHE_ALIAS" naming a '
                'django-redis cache in CACHES, or "REDIS_SENTINEL" (a dict with '
                '"SERVICE" and "NODES").',
            )
        ]
    cluster = raw.get("REDIS_CLUSTER", False)
    if not isinstance(cluster, bool):
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_CLUSTER"] must be True or False; '
                f"got {short_repr(cluster)}.",
                '"REDIS_CLUSTER": True with "REDIS_URL" naming any node of the '
                "cluster.",
            )
        ]
    if cluster and given != ["REDIS_URL"]:
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_CLUSTER"] needs "REDIS_URL"; {given[0]} is set.',
                'Set "REDIS_URL" to any node of the cluster, e.g. '
                '"redis://10.0.0.1:7000/0"; the client finds the other nodes.',
            )
        ]
    if given == ["REDIS_SENTINEL"]:
        return sentinel_problems(raw["REDIS_SENTINEL"])
    if url is not None:
        scheme = urlsplit(url).scheme if isinstance(url, str) else None
        if scheme not in REDIS_SCHEMES:
            shown = repr(redact_url(url)) if isinstance(url, str) else short_repr(url)
            return [
                Problem(
                    check_ids.REDIS_URL,
                    f'DELAYQ["REDIS_URL"] must be a redis://, rediss:// or '
                    f"unix:// URL; got {shown}.",
                    'For example "redis://:password@127.0.0.1:6379/0", or '
                    '"rediss://..." for TLS.',
                )
            ]
        assert isinstance(url, str)
        malformed = url_problem(url)
        if malformed is not None:
            return [
                Problem(
                    check_ids.REDIS_URL,
                    f'DELAYQ["REDIS_URL"] {redact_url(url)!r} is malformed: '
                    f"{malformed}.",
                    "Percent-encode the special characters of the user name and "
                    "password (urllib.parse.quote(password, safe='')): "
                    "'#' as %23, '/' as %2F, '?' as %3F, '@' as %40, ':' as %3A.",
                )
            ]
        refusal = client_refusal(url)
        if refusal is not None:
            return [
                Problem(
                    check_ids.REDIS_URL,
                    f'DELAYQ["REDIS_URL"] {redact_url(url)!r} is refused by '
                    f"redis-py: {redact_secrets(refusal, url)}.",
                    "Fix or remove the query argument it names; redis-py reads "
                    "the ones its ConnectionPool.from_url() documents (db, "
                    "socket_timeout, ...), each with a value of its type.",
                )
            ]
        if cluster:
            return cluster_url_problems(url)
        return []
    caches = getattr(django_settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            Problem(
                check_ids.CACHE_ALIAS,
                f'DELAYQ["CACHE_ALIAS"] = {short_repr(alias)} is not a key of '
                f"settings.CACHES.",
                f"Use one of: {', '.join(map(repr, caches)) or '(none)'}.",
            )
        ]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis.") and backend != DJANGO_REDIS_CACHE:
        return [
            Problem(
                check_ids.CACHE_ALIAS,
                f"CACHES[{short_repr(alias)}] uses {backend!r}; CACHE_ALIAS must "
                f"name a Redis cache (Django's own, or django-redis).",
                f'Set its BACKEND to "{DJANGO_REDIS_CACHE}" or '
                '"django_redis.cache.RedisCache", or use "REDIS_URL" instead '
                'of "CACHE_ALIAS".',
            )
        ]
    return []


#: A scheme and its separator as far as someone typed them: ``redis://``,
#: and its typos ``redis:/``, ``redis:``, ``redis//``, after any blanks.
_SCHEME_ISH = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*(?::/*|/+)")
#: A query argument: its name, and its value up to the next one.
_QUERY_ARGUMENT = re.compile(r"([^?&;#=]*)=([^&;#]*)")


def redact_url(url: str) -> str:
    """``url`` with whatever may be a credential masked, for messages and logs.

    Masked: everything between the scheme (or what was typed for one) and
    the last ``@`` (so also a password whose ``@`` or ``/`` was not
    encoded, and the forms redis-py accepts or that are typos of them:
    ``redis:/:pw@host``, ``redis:pw@host``, ``redis//:pw@host``, a leading
    blank); with no ``@``, a non-numeric "port" (``redis://:pw``); and
    every ``password=`` query value.
    """
    scheme = _SCHEME_ISH.match(url)
    start = scheme.end() if scheme else 0
    head, rest = url[:start], url[start:]
    if "@" in rest:
        rest = "***" + rest[rest.rindex("@") :]
    else:
        authority = re.match(r"[^/?#]*", rest)
        assert authority is not None  # matches the empty string at least
        host, colon, port = authority.group().partition(":")
        if colon and not port.isdigit():
            rest = f"{host}:***{rest[authority.end() :]}"
    return _QUERY_ARGUMENT.sub(_masked_password, head + rest)


def _masked_password(argument: re.Match[str]) -> str:
    # Compared decoded, as redis-py reads ``?pass%77ord=`` as a password too.
    if unquote_plus(argument[1]).strip().lower() == "password":
        return f"{argument[1]}=***"
    return argument[0]


def redact_secrets(text: str, url: str) -> str:
    """``text`` (a library's error about ``url``) without the URL's user
    name and password, should it quote them."""
    parts = urlsplit(url)
    for secret in (parts.password, parts.username):
        if secret:
            text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text


def url_problem(url: str) -> str | None:
    """What makes a redis://, rediss:// or unix:// URL unusable, or None.

    Such URLs mostly come from a password with a character that has a
    meaning in URLs and was not percent-encoded: the rest of the password
    then reads as a path, a query or a fragment, and the client would
    connect somewhere else, or print the password in its error.
    """
    if url != url.strip():
        return "it starts or ends with a blank (a space, a tab, a new line)"
    parts = urlsplit(url)
    if parts.fragment or url.endswith("#"):
        return "it has a '#' part, which no Redis URL has"
    if parts.scheme == "unix":
        return None if parts.path else "it names no socket path"
    try:
        parts.port  # noqa: B018 - a non-numeric port raises here
    except ValueError:
        return "its port is not a number"
    if not parts.hostname:
        return "it names no host"
    if not re.fullmatch(r"/?\d*", parts.path):
        return "its path must be a database number, like /0"
    return None


def cluster_url_problems(url: str) -> list[Problem]:
    parts = urlsplit(url)
    hint = (
        'Set "REDIS_URL" to any node of the cluster, e.g. '
        '"redis://10.0.0.1:7000/0" or "rediss://..." for TLS.'
    )
    if parts.scheme == "unix":
        return [
            Problem(
                check_ids.CLUSTER,
                'DELAYQ["REDIS_CLUSTER"] needs a redis:// or rediss:// '
                "REDIS_URL; a cluster is not reached through a unix socket.",
                hint,
            )
        ]
    if parts.path.strip("/") not in ("", "0"):
        return [
            Problem(
                check_ids.CLUSTER,
                f'DELAYQ["REDIS_URL"] selects database {parts.path.strip("/")!r}; '
                f"a Redis Cluster has only database 0.",
                hint,
            )
        ]
    return []


def sentinel_problems(value: Any) -> list[Problem]:
    def problem(msg: str, hint: str = f"For example {SENTINEL_EXAMPLE}.") -> Problem:
        return Problem(check_ids.SENTINEL, msg, hint)

    if not isinstance(value, Mapping):
        return [
            problem(
                f'DELAYQ["REDIS_SENTINEL"] must be a dict, not {type(value).__name__}.'
            )
        ]
    problems = []
    unknown = sorted(str(key) for key in value if key not in SENTINEL_KEYS)
    if unknown:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"] has unknown key(s) {unknown}.',
                f"Known keys: {', '.join(SENTINEL_KEYS)}.",
            )
        )
    service = value.get("SERVICE")
    if not isinstance(service, str) or not service:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["SERVICE"] must be the name the '
                f"sentinels monitor the primary under; got {short_repr(service)}.",
                'For example "SERVICE": "mymaster" (the name in "sentinel '
                'monitor mymaster ..." of sentinel.conf).',
            )
        )
    nodes = value.get("NODES")
    if (
        not isinstance(nodes, list | tuple)
        or not nodes
        or any(sentinel_node(node) is None for node in nodes)
    ):
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["NODES"] must be a non-empty list of '
                f'"host:port" strings (or (host, port) pairs); '
                f"got {short_repr(nodes)}.",
                'For example "NODES": ["10.0.0.1:26379", "10.0.0.2:26379", '
                '"10.0.0.3:26379"].',
            )
        )
    db = value.get("DB", 0)
    if not is_int(db) or db < 0:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["DB"] must be a database number, 0 or '
                f"more; got {short_repr(db)}.",
                'Remove it to use database 0, or set e.g. "DB": 1.',
            )
        )
    for key in ("USERNAME", "SENTINEL_USERNAME"):
        user = value.get(key)
        if user is not None and (
            not isinstance(user, str) or not user or re.search(r"\s", user)
        ):
            got = (
                short_repr(user)
                if isinstance(user, str)
                else f"a {type(user).__name__}"
            )
            problems.append(
                problem(
                    f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be the name of a '
                    f"Redis ACL user (a non-empty string without blanks) or None; "
                    f"got {got}.",
                    f'For example "{key}": "delayq"; remove the key to log in as '
                    f"Redis's default user (with the {_PASSWORD_OF[key]} alone).",
                )
            )
    for key in ("PASSWORD", "SENTINEL_PASSWORD"):
        secret = value.get(key)
        if secret is not None and not isinstance(secret, str):
            problems.append(
                problem(
                    f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be a string or None; '
                    f"got a {type(secret).__name__}.",
                    "Passwords are strings; remove the key if there is none.",
                )
            )
    ssl = value.get("SSL", False)
    if not isinstance(ssl, bool):
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["SSL"] must be True or False; '
                f"got {short_repr(ssl)}.",
                '"SSL": True connects to the sentinels and the primary over TLS.',
            )
        )
    problems += _sentinel_tls_problems(value, problem)
    return problems


#: The password that goes with each user name of REDIS_SENTINEL.
_PASSWORD_OF = {"USERNAME": "PASSWORD", "SENTINEL_USERNAME": "SENTINEL_PASSWORD"}


def _sentinel_tls_problems(
    value: Mapping[Any, Any], problem: Callable[..., Problem]
) -> list[Problem]:
    """REDIS_SENTINEL's TLS options: files that exist, a known
    ``SSL_CERT_REQS``, and ``"SSL": True`` for any of them to apply."""
    problems: list[Problem] = []
    for key in SENTINEL_TLS_FILES:
        path = value.get(key)
        if path is None:
            continue
        if not isinstance(path, str | os.PathLike) or not _is_text(os.fspath(path)):
            got = (
                short_repr(path)
                if isinstance(path, str)
                else f"a {type(path).__name__}"
            )
            problems.append(
                problem(
                    f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be the path of a PEM '
                    f"file (a string or a pathlib.Path) or None; got {got}.",
                    f'For example "{key}": "/etc/ssl/redis/{_EXAMPLE_FILE[key]}".',
                )
            )
        elif not os.path.isfile(path) or not os.access(path, os.R_OK):
            problems.append(
                problem(
                    f'DELAYQ["REDIS_SENTINEL"]["{key}"] names {os.fspath(path)!r}, '
                    f"which is not a file this process can read.",
                    "Fix the path (relative paths start from the current "
                    "directory, not the project's), or mount the file where "
                    "the processes run.",
                )
            )
    if value.get("SSL_KEYFILE") is not None and value.get("SSL_CERTFILE") is None:
        problems.append(
            problem(
                'DELAYQ["REDIS_SENTINEL"]["SSL_KEYFILE"] is set without '
                '"SSL_CERTFILE": a private key alone is no client certificate.',
                'Set "SSL_CERTFILE" to the client certificate the key belongs to.',
            )
        )
    reqs = value.get("SSL_CERT_REQS", "required")
    if reqs not in SENTINEL_CERT_REQS:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"]["SSL_CERT_REQS"] must be one of '
                f"{', '.join(map(repr, SENTINEL_CERT_REQS))}; got {short_repr(reqs)}.",
                '"required" (the default) verifies the servers\' certificates '
                'against "SSL_CA_CERTS" (or the system\'s CAs); "none" verifies '
                "nothing, and lets anyone on the path read and change the traffic.",
            )
        )
    given = [
        key
        for key in (*SENTINEL_TLS_FILES, "SSL_CERT_REQS")
        if key in value and value[key] is not None
    ]
    if given and value.get("SSL") is not True:
        problems.append(
            problem(
                f'DELAYQ["REDIS_SENTINEL"] sets {", ".join(given)} but not '
                f'"SSL": True, so the connections would not use TLS at all.',
                'Add "SSL": True, or remove the TLS options.',
            )
        )
    return problems


def _is_text(path: str | bytes) -> bool:
    """Whether a path is a non-empty ``str`` (redis-py's TLS files are)."""
    return isinstance(path, str) and bool(path)


#: The file names of the examples in the TLS options' messages.
_EXAMPLE_FILE = {
    "SSL_CA_CERTS": "ca.pem",
    "SSL_CERTFILE": "client.pem",
    "SSL_KEYFILE": "client.key",
}


def sentinel_node(node: Any) -> tuple[str, int] | None:
    """``"host:port"`` or ``(host, port)`` as a pair, or None if malformed."""
    if isinstance(node, str):
        host, sep, port_text = node.rpartition(":")
        if not sep or not port_text.isdigit():
            return None
        host, port = host.strip("[]"), int(port_text)  # [::1]:26379
    elif isinstance(node, list | tuple) and len(node) == 2:
        host, port = node
    else:
        return None
    if not isinstance(host, str) or not host or not is_int(port):
        return None
    return (host, port) if 0 < port < 65536 else None
