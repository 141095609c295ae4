"""`manage.py check --deploy`: what a production review of the Redis flags.

Each case runs a real redis-server configured the way it describes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import checks
from django.core.checks import CheckMessage

from django_delayq import conf
from django_delayq.checks import deploy
from tests.conftest import delayq_settings
from tools.servers import RedisServer, free_port

pytestmark = pytest.mark.django_db(transaction=True)


def deploy_ids() -> set[str]:
    found = checks.run_checks(include_deployment_checks=True, tags=["django_delayq"])
    return {message.id for message in found if message.id.startswith("delayq.")}


@pytest.fixture
def server(request) -> Iterator[RedisServer]:
    redis_server = RedisServer(**request.param)
    redis_server.start()
    try:
        yield redis_server
    finally:
        redis_server.stop()


CARELESS = {"extra_args": ["--maxmemory-policy", "allkeys-lru"]}
CAREFUL = {"password": "s3cret", "extra_args": ["--appendonly", "yes"]}


@pytest.mark.parametrize("server", [CARELESS], indirect=True)
def test_eviction_no_persistence_and_no_password_are_flagged(settings, server):
    settings.DELAYQ = delayq_settings(server.url)
    assert deploy_ids() == {"delayq.W002", "delayq.W003", "delayq.W005"}
    # Not by a plain `check`.
    plain = {m.id for m in checks.run_checks(tags=["django_delayq"])}
    assert not plain & {"delayq.W002", "delayq.W003", "delayq.W005"}


@pytest.mark.parametrize("server", [CAREFUL], indirect=True)
def test_a_careful_redis_on_loopback_passes(settings, server):
    settings.DELAYQ = delayq_settings(server.url)
    assert deploy_ids() == set()


def test_plaintext_to_another_host_is_flagged_from_the_url_alone():
    # Read from the URL, without connecting: no traffic leaves this machine
    # (192.0.2.0/24 is reserved for documentation).
    def url_ids(url: str) -> set[str]:
        found = deploy._url_warnings(conf.parse(delayq_settings(url)))
        return {message.id for message in found}

    assert url_ids("redis://:pw@192.0.2.10:6379/0") == {"delayq.W004"}
    assert url_ids("rediss://:pw@192.0.2.10:6379/0") == set()
    assert url_ids("redis://:pw@127.0.0.1:6379/0") == set()


def test_sentinel_without_tls_to_another_host_is_flagged_from_the_settings_alone():
    def sentinel_ids(nodes: list[str], **options: object) -> set[str]:
        raw = delayq_settings("")
        del raw["REDIS_URL"]
        raw["REDIS_SENTINEL"] = {
            "SERVICE": "mymaster",
            "NODES": nodes,
            "PASSWORD": "pw",
            **options,
        }
        found = deploy._url_warnings(conf.parse(raw))
        return {message.id for message in found}

    remote = ["192.0.2.10:26379", "192.0.2.11:26379"]
    assert sentinel_ids(remote) == {"delayq.W004"}
    assert sentinel_ids(remote, SSL=True) == set()
    assert sentinel_ids(remote, SSL=True, SSL_CERT_REQS="none") == {"delayq.W004"}
    assert sentinel_ids(["127.0.0.1:26379"]) == set()


@pytest.mark.parametrize("server", [CAREFUL], indirect=True)
@pytest.mark.parametrize("mode", ["manual", "immediate"])
def test_a_test_mode_with_debug_off_is_an_error(settings, server, mode):
    settings.DEBUG = False
    settings.DELAYQ = {**delayq_settings(server.url), "TEST_MODE": mode}
    [error] = [
        m
        for m in checks.run_checks(
            include_deployment_checks=True, tags=["django_delayq"]
        )
        if m.id.startswith("delayq.")
    ]
    assert error.id == "delayq.E017"
    assert error.level == checks.ERROR
    assert error.msg.startswith(f'DELAYQ["TEST_MODE"] is {mode!r} with DEBUG off: ')
    assert error.hint.startswith('Remove "TEST_MODE" from the production settings')
    # Not by a plain `check`, which test runs make with DEBUG off too.
    plain = {m.id for m in checks.run_checks(tags=["django_delayq"])}
    assert "delayq.E017" not in plain
    # A test settings module, run with DEBUG on: nothing to report.
    settings.DEBUG = True
    assert deploy_ids() == set()


@pytest.mark.parametrize("server", [CARELESS], indirect=True)
def test_a_test_mode_does_not_hide_what_the_production_redis_lacks(settings, server):
    settings.DEBUG = False
    settings.DELAYQ = {**delayq_settings(server.url), "TEST_MODE": "manual"}
    assert deploy_ids() == {
        "delayq.E017",
        "delayq.W002",
        "delayq.W003",
        "delayq.W005",
    }


def server_not_checked() -> CheckMessage:
    [found] = [
        m
        for m in checks.run_checks(
            include_deployment_checks=True, tags=["django_delayq"]
        )
        if m.id == "delayq.W007"
    ]
    return found


def test_an_unreachable_redis_is_said_to_be_unchecked(settings):
    settings.DELAYQ = delayq_settings(f"redis://:pw@127.0.0.1:{free_port()}/0")
    assert deploy_ids() == {"delayq.W007"}
    warning = server_not_checked()
    assert warning.msg.startswith(
        "Could not check Redis' eviction policy and persistence (delayq.W002, "
        "delayq.W003): Redis does not answer (ConnectionError"
    )
    assert "pw" not in warning.msg
    assert "SILENCED_SYSTEM_CHECKS" in warning.hint


REFUSES_CONFIG = {"extra_args": ["--rename-command", "CONFIG", '""']}


@pytest.mark.parametrize("server", [REFUSES_CONFIG], indirect=True)
def test_a_redis_refusing_config_is_said_to_be_unchecked(settings, server):
    settings.DELAYQ = delayq_settings(server.url)
    assert deploy_ids() == {"delayq.W005", "delayq.W007"}
    assert server_not_checked().msg.endswith(": Redis refuses CONFIG GET.")


@pytest.mark.parametrize("server", [CAREFUL], indirect=True)
def test_a_time_limit_longer_than_the_visibility_timeout_is_flagged(settings, server):
    from django_delayq import task
    from django_delayq.registry import unregister

    settings.DELAYQ = {**delayq_settings(server.url), "VISIBILITY_TIMEOUT": 60}
    assert deploy_ids() == set()  # the test tasks' limits are under a second

    @task(name="reports.slow_export", time_limit=900)
    def slow_export() -> None:
        pass

    try:
        found = [
            m
            for m in checks.run_checks(
                include_deployment_checks=True, tags=["django_delayq"]
            )
            if m.id == "delayq.W006"
        ]
        [warning] = found
        assert "'reports.slow_export'" in warning.msg
        assert "(60 s) is shorter than" in warning.msg
        assert "(900 s)" in warning.msg
        assert 'Raise DELAYQ["VISIBILITY_TIMEOUT"] above 900 s' in warning.hint
        # The global limit is named on its own; one equal to the timeout is not.
        settings.DELAYQ = {
            **delayq_settings(server.url),
            "VISIBILITY_TIMEOUT": 600,
            "TIME_LIMIT": 601,
        }
        msgs = [
            m.msg
            for m in checks.run_checks(
                include_deployment_checks=True, tags=["django_delayq"]
            )
            if m.id == "delayq.W006"
        ]
        assert len(msgs) == 2
        assert any('DELAYQ["TIME_LIMIT"] (601 s)' in m for m in msgs)
        settings.DELAYQ = {**delayq_settings(server.url), "VISIBILITY_TIMEOUT": 900}
        assert deploy_ids() == set()
        # Not by a plain `check`.
        settings.DELAYQ = {**delayq_settings(server.url), "VISIBILITY_TIMEOUT": 60}
        plain = {m.id for m in checks.run_checks(tags=["django_delayq"])}
        assert "delayq.W006" not in plain
    finally:
        unregister("reports.slow_export")
