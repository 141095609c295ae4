"""The system checks, by id, as ``manage.py check`` reports them."""

from __future__ import annotations

import os

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from hypothesis import given
from hypothesis import strategies as st

from django_delayq import registry, task
from django_delayq.checks.config import check_settings, check_tasks
from django_delayq.conf import DEFAULTS, find_problems, get_settings, parse
from django_delayq.exceptions import InvalidConfiguration

URL = "redis://127.0.0.1:6379/0"
SENTINEL = {"SERVICE": "mymaster", "NODES": ["10.0.0.1:26379", "10.0.0.2:26379"]}


def ids(settings, value):
    """Check ids from check_settings (the settings check alone)."""
    settings.DELAYQ = value
    return sorted(m.id for m in check_settings())


def task_ids(settings, value, name):
    """Check ids that check_tasks reports for one task."""
    settings.DELAYQ = value
    return [m.id for m in check_tasks() if m.obj == name]


def test_valid_settings_pass_every_delayq_check(settings):
    queues = {"orders": {"shards": 4}, "reports": {}}
    settings.DELAYQ = {"REDIS_URL": URL, "QUEUES": queues}
    assert checks.run_checks(tags=["django_delayq"]) == []


def test_e008_finds_tasks_in_modules_nothing_imported_yet(settings):
    # tests/discovered/tasks.py is imported by no test: the check must
    # autodiscover it to see its queue.
    name = "tests.discovered.tasks.build_report"
    assert task_ids(settings, {"REDIS_URL": URL}, name) == ["delayq.E008"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["REDIS_URL", URL], ["delayq.E001"]),
        ({}, ["delayq.E002"]),
        ({"REDIS_URL": URL, "CACHE_ALIAS": "default"}, ["delayq.E002"]),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, ["delayq.E003"]),
        ({"REDIS_URL": 6379}, ["delayq.E003"]),
        ({"CACHE_ALIAS": "missing"}, ["delayq.E004"]),
        ({"CACHE_ALIAS": "default"}, ["delayq.E004"]),  # locmem, not django-redis
        ({"REDIS_URL": URL, "QUEUES": ["orders"]}, ["delayq.E005"]),
        ({"REDIS_URL": URL, "QUEUES": {"orders": {"shards": 0}}}, ["delayq.E005"]),
        ({"REDIS_URL": URL, "QUEUES": {"bad name!": {}}}, ["delayq.E005"]),
        ({"REDIS_URL": URL, "QUEUES": {"orders": {"shard": 2}}}, ["delayq.E005"]),
        ({"REDIS_URL": URL, "MAX_PAYLOAD_BYTES": 0}, ["delayq.E006"]),
        ({"REDIS_URL": URL, "MAX_RESULT_BYTES": 1.5}, ["delayq.E006"]),
        ({"REDIS_URL": URL, "MAX_ATTEMPTS": "3"}, ["delayq.E006"]),
        ({"REDIS_URL": URL, "REDIS_TIMEOUT": float("nan")}, ["delayq.E006"]),
        ({"REDIS_URL": URL, "KEY_PREFIX": "app{1}"}, ["delayq.E007"]),
        ({"REDIS_URL": URL, "REDIS_ULR": URL}, ["delayq.W001"]),
        ({"REDIS_URL": URL, "REDIS_SENTINEL": SENTINEL}, ["delayq.E002"]),
        ({"REDIS_SENTINEL": "mymaster"}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {"NODES": ["h:26379"]}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "NODES": []}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "NODES": ["h"]}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "NODES": ["h:0"]}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "NODES": "h:26379"}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "DB": -1}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "PASSWORD": 123}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "USERNAME": 123}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "SENTINEL_USERNAME": ""}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "SSL_CERT_REQS": "none"}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "SSL": "yes"}}, ["delayq.E012"]),
        ({"REDIS_SENTINEL": {**SENTINEL, "MASTER": "x"}}, ["delayq.E012"]),
        ({"REDIS_URL": URL, "REDIS_CLUSTER": "yes"}, ["delayq.E013"]),
        ({"REDIS_URL": URL, "REDIS_CLUSTER": 1}, ["delayq.E013"]),
        ({"REDIS_SENTINEL": SENTINEL, "REDIS_CLUSTER": True}, ["delayq.E013"]),
        ({"CACHE_ALIAS": "default", "REDIS_CLUSTER": True}, ["delayq.E013"]),
        ({"REDIS_URL": "redis://h:7000/2", "REDIS_CLUSTER": True}, ["delayq.E013"]),
        ({"REDIS_URL": "unix:///r.sock", "REDIS_CLUSTER": True}, ["delayq.E013"]),
    ],
)
def test_each_bad_setting_has_its_own_check_id(settings, value, expected):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    }
    assert ids(settings, value) == expected


@pytest.mark.parametrize(
    "url", ["redis://10.0.0.1:7000", "redis://10.0.0.1:7000/0", "rediss://h:7000/"]
)
def test_a_cluster_needs_only_a_node_url(settings, url):
    settings.DELAYQ = {"REDIS_URL": url, "REDIS_CLUSTER": True}
    assert check_settings() == []
    assert get_settings().cluster is True


def test_e013_says_what_a_cluster_needs(settings):
    settings.DELAYQ = {"REDIS_URL": "redis://h:7000/3", "REDIS_CLUSTER": True}
    [message] = check_settings()
    assert message.id == "delayq.E013"
    assert "database '3'" in message.msg
    assert "only database 0" in message.msg
    settings.DELAYQ = {"REDIS_SENTINEL": SENTINEL, "REDIS_CLUSTER": True}
    [message] = check_settings()
    assert 'needs "REDIS_URL"; REDIS_SENTINEL is set' in message.msg


def test_missing_setting_is_reported(settings):
    del settings.DELAYQ
    messages = check_settings()
    assert [m.id for m in messages] == ["delayq.E002"]
    assert "DELAYQ is not set" in messages[0].msg


def test_unknown_key_warning_suggests_the_close_match(settings):
    settings.DELAYQ = {"REDIS_URL": URL, "REDIS_ULR": URL}
    [message] = check_settings()
    assert message.hint == "Did you mean 'REDIS_URL'?"


def test_task_on_an_unconfigured_queue_is_reported_as_e008(settings):
    def billing_task() -> None: ...

    registered = task(name="tests.billing_task", queue="billing")(billing_task)
    try:
        name = registered.name
        assert task_ids(settings, {"REDIS_URL": URL}, name) == ["delayq.E008"]
        configured = {"REDIS_URL": URL, "QUEUES": {"billing": {}}}
        assert task_ids(settings, configured, name) == []
    finally:
        registry.unregister(registered.name)


@pytest.mark.django_db  # Django 6.1's model checks query the database
def test_manage_py_check_fails_on_errors(settings):
    settings.DELAYQ = {"REDIS_URL": "http://nope"}
    with pytest.raises(SystemCheckError, match=r"delayq\.E003"):
        call_command("check")


def test_runtime_parsing_raises_the_same_message_with_its_id(settings):
    settings.DELAYQ = {"REDIS_URL": URL, "QUEUES": {"orders": {"shards": -1}}}
    with pytest.raises(InvalidConfiguration, match=r"shards.*\(delayq\.E005\)"):
        get_settings()


def test_settings_are_reparsed_when_they_change(settings):
    settings.DELAYQ = {"REDIS_URL": URL, "MAX_ATTEMPTS": 7}
    assert get_settings().max_attempts == 7
    settings.DELAYQ = {"REDIS_URL": URL}
    assert get_settings().max_attempts == 3
    assert set(get_settings().queues) == {"default"}


def test_e002_names_every_connection_key_that_is_set(settings):
    settings.DELAYQ = {"REDIS_URL": URL, "REDIS_SENTINEL": SENTINEL}
    [message] = check_settings()
    assert message.msg == (
        'DELAYQ needs exactly one of "REDIS_URL", "CACHE_ALIAS" and '
        '"REDIS_SENTINEL"; REDIS_URL and REDIS_SENTINEL are set.'
    )


def test_e012_says_what_nodes_look_like(settings):
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, "NODES": ["10.0.0.1"]}}
    [message] = check_settings()
    assert message.msg == (
        'DELAYQ["REDIS_SENTINEL"]["NODES"] must be a non-empty list of '
        "\"host:port\" strings (or (host, port) pairs); got ['10.0.0.1']."
    )
    assert message.hint.startswith('For example "NODES": ["10.0.0.1:26379"')


def test_a_sentinel_setting_is_parsed_with_its_defaults(settings):
    settings.DELAYQ = {
        "REDIS_SENTINEL": {
            "SERVICE": "mymaster",
            "NODES": ["10.0.0.1:26379", ("10.0.0.2", 26380), "[::1]:26381"],
            "SENTINEL_PASSWORD": "s3cret",
        }
    }
    sentinel = get_settings().sentinel
    assert sentinel is not None
    assert sentinel.nodes == (
        ("10.0.0.1", 26379),
        ("10.0.0.2", 26380),
        ("::1", 26381),
    )
    assert (sentinel.service, sentinel.db, sentinel.password, sentinel.ssl) == (
        "mymaster",
        0,
        None,
        False,
    )
    assert sentinel.sentinel_password == "s3cret"
    assert get_settings().redis_url is None


class BytesPath(os.PathLike):
    """A path object whose path is bytes."""

    def __fspath__(self):
        return b"/etc/ssl/ca.pem"


@pytest.fixture
def pem(tmp_path):
    """A file where the TLS options expect one (its content is not read at
    check time)."""
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def test_the_sentinel_acl_users_and_tls_options_are_parsed(settings, pem):
    settings.DELAYQ = {
        "REDIS_SENTINEL": {
            **SENTINEL,
            "USERNAME": "delayq",
            "PASSWORD": "app-s3cret",
            "SENTINEL_USERNAME": "delayq-sentinel",
            "SENTINEL_PASSWORD": "s3cret",
            "SSL": True,
            "SSL_CA_CERTS": pem,  # a pathlib.Path, as BASE_DIR / "..." gives
            "SSL_CERTFILE": str(pem),
            "SSL_KEYFILE": str(pem),
            "SSL_CERT_REQS": "optional",
        }
    }
    assert check_settings() == []
    sentinel = get_settings().sentinel
    assert sentinel is not None
    assert (sentinel.username, sentinel.sentinel_username) == (
        "delayq",
        "delayq-sentinel",
    )
    assert sentinel.tls_kwargs() == {
        "ssl": True,
        "ssl_ca_certs": str(pem),
        "ssl_certfile": str(pem),
        "ssl_keyfile": str(pem),
        "ssl_cert_reqs": "optional",
    }


def test_without_tls_options_the_sentinel_defaults_stay_redis_pys(settings):
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, "SSL": True}}
    sentinel = get_settings().sentinel
    assert sentinel is not None
    assert (sentinel.username, sentinel.sentinel_username) == (None, None)
    assert sentinel.tls_kwargs() == {
        "ssl": True,
        "ssl_ca_certs": None,
        "ssl_certfile": None,
        "ssl_keyfile": None,
        "ssl_cert_reqs": "required",
    }
    settings.DELAYQ = {"REDIS_SENTINEL": SENTINEL}
    assert get_settings().sentinel.tls_kwargs() == {"ssl": False}


@pytest.mark.parametrize("key", ["USERNAME", "SENTINEL_USERNAME"])
@pytest.mark.parametrize(
    ("user", "shown"),
    [(123, "got a int."), (b"delayq", "got a bytes."), ("", "got ''."),
     ("del ayq", "got 'del ayq'."), (["delayq"], "got a list.")],
)  # fmt: skip
def test_a_bad_sentinel_user_name_is_refused_naming_the_key(settings, key, user, shown):
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, key: user}}
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg == (
        f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be the name of a Redis ACL '
        f"user (a non-empty string without blanks) or None; {shown}"
    )
    assert message.hint.startswith(f'For example "{key}": "delayq"; remove the key')
    with pytest.raises(InvalidConfiguration, match=key):
        get_settings()


@pytest.mark.parametrize("key", ["SSL_CA_CERTS", "SSL_CERTFILE", "SSL_KEYFILE"])
@pytest.mark.parametrize("path", [123, b"/etc/ssl/ca.pem", "", True, BytesPath()])
def test_a_tls_file_of_the_wrong_type_is_refused_naming_the_key(
    settings, pem, key, path
):
    settings.DELAYQ = {
        "REDIS_SENTINEL": {**SENTINEL, "SSL": True, "SSL_CERTFILE": pem, key: path}
    }
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg.startswith(
        f'DELAYQ["REDIS_SENTINEL"]["{key}"] must be the path of a PEM file'
    )


@pytest.mark.parametrize("key", ["SSL_CA_CERTS", "SSL_CERTFILE"])
def test_a_missing_tls_file_is_refused_at_check_time_naming_key_and_path(
    settings, tmp_path, key
):
    missing = tmp_path / "nowhere" / "ca.pem"
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, "SSL": True, key: missing}}
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg == (
        f'DELAYQ["REDIS_SENTINEL"]["{key}"] names {str(missing)!r}, which is '
        f"not a file this process can read."
    )
    # A folder is no file either.
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, "SSL": True, key: tmp_path}}
    [message] = check_settings()
    assert "which is not a file" in message.msg


def test_a_key_file_needs_its_certificate(settings, pem):
    settings.DELAYQ = {"REDIS_SENTINEL": {**SENTINEL, "SSL": True, "SSL_KEYFILE": pem}}
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg.startswith(
        'DELAYQ["REDIS_SENTINEL"]["SSL_KEYFILE"] is set without "SSL_CERTFILE"'
    )


# None too: redis-py would read it as "none" and verify nothing.
@pytest.mark.parametrize("reqs", ["REQUIRED", "yes", True, 2, "", None])
def test_an_unknown_cert_reqs_is_refused(settings, reqs):
    settings.DELAYQ = {
        "REDIS_SENTINEL": {**SENTINEL, "SSL": True, "SSL_CERT_REQS": reqs}
    }
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg.startswith(
        """DELAYQ["REDIS_SENTINEL"]["SSL_CERT_REQS"] must be one of 'required', """
        """'optional', 'none'; got"""
    )


@pytest.mark.parametrize("ssl", [False, None])
def test_tls_options_without_ssl_are_refused_rather_than_ignored(settings, pem, ssl):
    sentinel = {**SENTINEL, "SSL_CA_CERTS": pem, "SSL_CERT_REQS": "required"}
    if ssl is not None:
        sentinel["SSL"] = ssl
    settings.DELAYQ = {"REDIS_SENTINEL": sentinel}
    [message] = check_settings()
    assert message.id == "delayq.E012"
    assert message.msg == (
        'DELAYQ["REDIS_SENTINEL"] sets SSL_CA_CERTS, SSL_CERT_REQS but not '
        '"SSL": True, so the connections would not use TLS at all.'
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:pa#s3cret@10.0.0.1:6379/0", "has a '#' part"),
        ("redis://:pa/s3cret@10.0.0.1:6379/0", "port is not a number"),
        ("redis://:pa?s3cret@10.0.0.1:6379/0", "port is not a number"),
        ("redis://:s3cret@10.0.0.1:6379/zero", "must be a database number"),
        ("http://:s3cret@10.0.0.1:6379/0", "must be a redis://"),
    ],
)
def test_a_malformed_redis_url_is_refused_without_printing_its_password(
    settings, url, says
):
    settings.DELAYQ = {"REDIS_URL": url}
    [problem] = check_settings()
    assert problem.id == "delayq.E003"
    assert says in problem.msg
    assert "***@10.0.0.1:6379" in problem.msg
    assert "s3cret" not in problem.msg + problem.hint
    with pytest.raises(InvalidConfiguration) as caught:
        get_settings()
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:p@ss@10.0.0.1:6379/0",  # the last '@' ends the credentials
        "redis://:a:b@10.0.0.1/0",
        "rediss://10.0.0.1:6380",
        "unix:///run/redis.sock?db=2",
    ],
)
def test_well_formed_redis_urls_pass(settings, url):
    assert ids(settings, {"REDIS_URL": url}) == []


def test_a_huge_number_setting_is_a_check_error_not_a_crash(settings):
    settings.DELAYQ = {"REDIS_URL": URL, "VISIBILITY_TIMEOUT": 10**5000}
    [problem] = check_settings()
    assert problem.id == "delayq.E006"
    assert "got an int of 16610 bits" in problem.msg


SECRET = "pw-s3cr3t"
setting_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**5000),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.text(max_size=4) | st.integers(min_value=10**5000), max_size=3),
    st.dictionaries(
        st.text(max_size=6), st.integers() | st.text(max_size=4), max_size=3
    ),
    st.just(object()),
)
redis_urls = st.sampled_from(
    [
        f"redis://:{SECRET}@127.0.0.1:6379/0",
        f"redis://:{SECRET}#x@127.0.0.1:6379/0",  # unencoded '#'
        f"redis://user:{SECRET}/y@127.0.0.1:6379/0",  # unencoded '/'
        f"redis://user:{SECRET}?@127.0.0.1/0",
        f"http://:{SECRET}@127.0.0.1:6379/0",
        f"rediss://:{SECRET}@host:port/0",
        f"redis://:{SECRET}@127.0.0.1:6379/db",
        f"redis:/:{SECRET}@127.0.0.1:6379/0",
        f"redis//:{SECRET}@127.0.0.1:6379/0",
        f" redis://:{SECRET}@127.0.0.1:6379/0",
        f"redis://127.0.0.1:6379/x?password={SECRET}",
        f"redis://:{SECRET}@127.0.0.1:6379/0?socket_timeout=abc",
    ]
)
delayq_dicts = st.dictionaries(
    st.sampled_from([*DEFAULTS, "REDIS_ULR", "queues"]),
    setting_values,
    max_size=5,
).flatmap(
    lambda extra: st.fixed_dictionaries({"REDIS_URL": redis_urls}).map(
        lambda url: {**extra, **url}
    )
)


@given(raw=delayq_dicts | setting_values)
def test_any_delayq_value_gets_check_ids_and_never_shows_the_password(raw):
    problems = find_problems(raw)
    for problem in problems:
        assert problem.id.startswith(("delayq.E0", "delayq.W0")), problem
        assert SECRET not in f"{problem.msg} {problem.hint}", problem
    errors = [problem for problem in problems if problem.error]
    if errors:
        with pytest.raises(InvalidConfiguration) as refused:
            parse(raw)
        assert SECRET not in str(refused.value)
        assert str(refused.value).endswith(f"({errors[0].id})")
    else:
        parse(raw)


@pytest.mark.parametrize(
    "url",
    [
        f"redis//:{SECRET}@10.0.0.1:6379/0",  # "redis:" without its colon
        f"redis:/:{SECRET}@10.0.0.1:6379/0",  # one slash
        f"redis:{SECRET}@10.0.0.1:6379/0",  # no slash
        f" redis://:{SECRET}@10.0.0.1:6379/0",  # a leading blank
        f"redis://:{SECRET}@10.0.0.1:6379/0\n",  # a trailing new line
        f"redis://10.0.0.1:6379/zero?password={SECRET}",  # in the query
        f"redis://10.0.0.1:6379/0?pass%77ord={SECRET}&socket_timeout=abc",
        f"redis://:{SECRET}",  # no host: the password reads as a port
    ],
)
def test_a_redis_url_typo_is_refused_without_printing_its_password(
    settings, url, caplog
):
    settings.DELAYQ = {"REDIS_URL": url}
    [problem] = check_settings()
    assert problem.id == "delayq.E003"
    assert SECRET not in f"{problem.msg} {problem.hint}"
    assert "***" in problem.msg
    with pytest.raises(InvalidConfiguration) as refused:
        get_settings()
    assert SECRET not in str(refused.value)
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("socket_timeout=abc", "Invalid value for 'socket_timeout'"),
        ("health_check_interval=soon", "Invalid value for 'health_check_interval'"),
        ("sockettimeout=1", "unexpected keyword argument 'sockettimeout'"),
    ],
)
def test_a_redis_url_that_redis_py_refuses_fails_the_check(settings, query, says):
    settings.DELAYQ = {"REDIS_URL": f"redis://:{SECRET}@10.0.0.1:6379/0?{query}"}
    [problem] = check_settings()
    assert problem.id == "delayq.E003"
    assert "refused by redis-py" in problem.msg
    assert says in problem.msg
    assert SECRET not in f"{problem.msg} {problem.hint}"


def test_query_arguments_redis_py_reads_pass(settings):
    url = f"redis://10.0.0.1:6379/0?socket_timeout=0.5&password={SECRET}&db=2"
    assert ids(settings, {"REDIS_URL": url}) == []
