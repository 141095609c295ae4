"""Connection settings: REDIS_URL with AUTH, CACHE_ALIAS, and bounded waits."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
import redis
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import transaction

from django_delayq import schedule
from django_delayq.exceptions import InvalidConfiguration
from django_delayq.models import DelayedTask, OutboxEntry
from django_delayq.store import connection
from django_delayq.store.connection import get_client
from django_delayq.worker import READ_BLOCK_MS, Worker
from tests.conftest import delayq_settings
from tests.support.helpers import expected_score, indexed_score
from tests.testapp.tasks import add
from tools.procs import wait_for
from tools.servers import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


def test_cache_alias_reuses_a_django_redis_caches_server(
    settings, redis_server, redis_client
):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": redis_server.url,
        },
    }
    settings.DELAYQ = {
        "CACHE_ALIAS": "redis",
        "QUEUES": {"orders": {}},
        "TEST_KEY_PREFIX": "delayq",
    }
    task = schedule(add, args=[1, 2], delay=30)
    assert indexed_score(redis_client, task) == expected_score(task)
    # Our own pool, with our timeouts, not the cache's.
    kwargs = get_client().connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.25
    assert kwargs["port"] == redis_server.port


def test_cache_alias_may_name_djangos_own_redis_cache(settings, password_redis):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            # Its writer first, then a replica (here the same server).
            "LOCATION": [
                f"redis://:s3cret@127.0.0.1:{password_redis.port}/2",
                f"redis://:s3cret@127.0.0.1:{password_redis.port}/3",
            ],
            "OPTIONS": {"health_check_interval": 30},
        },
    }
    settings.DELAYQ = {
        "CACHE_ALIAS": "redis",
        "QUEUES": {"orders": {}},
        "TEST_KEY_PREFIX": "delayq",
    }
    found = checks.run_checks(tags=["django_delayq"])
    assert "delayq.E004" not in {message.id for message in found}
    task = schedule(add, args=[1, 2], delay=30)
    client = get_client()
    assert indexed_score(client, task) == expected_score(task)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["socket_timeout"]) == (2, 0.25)
    assert kwargs["health_check_interval"] == 30
    assert not OutboxEntry.objects.exists()


@pytest.fixture
def password_redis(settings) -> Iterator[RedisServer]:
    server = RedisServer(extra_args=["--requirepass", "s3cret"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_redis_auth_through_the_url(settings, password_redis):
    url = f"redis://:s3cret@127.0.0.1:{password_redis.port}/0"
    settings.DELAYQ = delayq_settings(url)
    task = schedule(add, args=[1, 2], delay=30)
    assert indexed_score(get_client(), task) == expected_score(task)
    assert not OutboxEntry.objects.exists()


def test_a_wrong_password_sends_the_task_to_the_outbox(settings, password_redis):
    url = f"redis://:wrong@127.0.0.1:{password_redis.port}/0"
    settings.DELAYQ = delayq_settings(url)
    task = schedule(add, args=[1, 2], delay=30)
    [entry] = OutboxEntry.objects.all()
    assert entry.task_id == task.pk
    assert "AuthenticationError" in entry.last_error


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "command", ["delayq_dispatch", "delayq_worker", "delayq_sweep"]
)
@pytest.mark.parametrize(
    ("credentials", "error"),
    [
        (":wrong@", "AuthenticationError: invalid username-password pair"),
        ("", "AuthenticationError: Authentication required"),
        ("confined:pw@", "NoPermissionError: .*this user has no permissions"),
    ],
)
def test_once_exits_non_zero_when_redis_refuses_the_credentials(
    settings, password_redis, command, credentials, error
):
    # A user whose ACL grants every command but no key of ours.
    admin = redis.Redis(port=password_redis.port, password="s3cret")
    admin.execute_command(
        "ACL", "SETUSER", "confined", "on", ">pw", "~elsewhere:*", "+@all"
    )
    admin.close()
    url = f"redis://{credentials}127.0.0.1:{password_redis.port}/0"
    settings.DELAYQ = delayq_settings(url)
    # A pass that cannot reach its keys says why and fails, rather than
    # retrying forever the way a looping command waits out an outage.
    with pytest.raises(CommandError, match=f"failed: {error}"):
        call_command(command, once=True, verbosity=0)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (via the backlog) but never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.mark.timeout(20)
def test_an_unresponsive_redis_is_given_up_after_redis_timeout(settings, silent_server):
    settings.DELAYQ = delayq_settings(
        f"redis://127.0.0.1:{silent_server}/0", REDIS_TIMEOUT=0.2
    )
    task = schedule(add, args=[1, 2], delay=30)
    [entry] = OutboxEntry.objects.all()
    assert entry.task_id == task.pk
    assert "Timeout" in entry.last_error


@pytest.mark.timeout(20)
def test_after_one_timeout_the_same_request_skips_redis(settings, silent_server):
    """Several tasks in one transaction wait for one timeout, not one each."""
    settings.DELAYQ = delayq_settings(
        f"redis://127.0.0.1:{silent_server}/0", REDIS_TIMEOUT=0.2
    )
    with transaction.atomic():
        tasks = [schedule(add, args=[i, i], delay=30) for i in range(4)]
    errors = dict(OutboxEntry.objects.values_list("task_id", "last_error"))
    assert set(errors) == {task.pk for task in tasks}
    assert "Timeout" in errors[tasks[0].pk]
    for task in tasks[1:]:
        assert errors[task.pk].startswith("skipped, Redis failed just before")


@pytest.mark.timeout(30)
def test_a_worker_whose_acl_denies_client_commands_stops_at_once(
    settings, password_redis
):
    """A common ACL (``+@all -@dangerous``) refuses CLIENT LIST and UNBLOCK:
    a stopping worker needs neither, as it ends its reads by shutting its
    own sockets down."""
    admin = redis.Redis(port=password_redis.port, password="s3cret")
    admin.execute_command(
        "ACL", "SETUSER", "worker", "on", ">pw", "~*", "&*", "+@all", "-@dangerous"
    )
    settings.DELAYQ = delayq_settings(
        f"redis://worker:pw@127.0.0.1:{password_redis.port}/0"
    )
    connection.reset()
    worker = Worker(queues=["default"])
    runner = threading.Thread(target=worker.run)
    runner.start()

    def blocked() -> int:
        return sum(
            1
            for info in admin.client_list(_type="normal")
            if info.get("user") == "worker" and "b" in info.get("flags", "")
        )

    try:
        wait_for(lambda: blocked() == 1, 10, "the worker blocked in its read")
        worker.stop()
        # The read would block for READ_BLOCK_MS (5 s) on the server.
        runner.join(timeout=READ_BLOCK_MS / 1000 - 1)
        assert not runner.is_alive()
        assert worker.stats.errors == 0
    finally:
        worker.stop()
        runner.join()
        admin.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://:{secret}@127.0.0.1:{port}/0?socket_timeout=abc",
        " redis://:{secret}@127.0.0.1:{port}/0",
        "redis:/:{secret}@127.0.0.1:{port}/0",
        "redis://127.0.0.1:{port}/0?password={secret}&health_check_interval=x",
    ],
)
def test_schedule_refuses_a_redis_url_redis_py_refuses_without_its_password(
    settings, redis_server, url, caplog
):
    secret = "pw-s3cr3t"
    settings.DELAYQ = delayq_settings(url.format(secret=secret, port=redis_server.port))
    with pytest.raises(InvalidConfiguration, match=r"\(delayq\.E003\)$") as refused:
        schedule(add, args=[1, 2], delay=30)
    assert secret not in str(refused.value)
    assert secret not in caplog.text
    assert not DelayedTask.objects.exists()
    assert not OutboxEntry.objects.exists()


@pytest.mark.parametrize("role", ["loop", "blocking"])
def test_a_client_serves_more_threads_at_once_than_redis_pys_default_pool(role):
    # A worker with --concurrency 256 reads with a connection per thread;
    # redis-py 8 caps a pool at 100 connections unless told otherwise.
    client = get_client(role)
    threads = 150
    together = threading.Barrier(threads)
    errors: list[BaseException] = []

    def wait_on_redis() -> None:
        together.wait()
        try:
            # Holds its connection for a second on the server: all overlap.
            client.blpop([b"delayq-test:nothing"], timeout=1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    started = [threading.Thread(target=wait_on_redis) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    assert errors == []


@pytest.mark.timeout(30)
def test_sentinels_that_do_not_answer_are_asked_once_each(settings):
    """redis-py retries a sentinel three times by default, with a backoff:
    seconds before schedule() may give up, where REDIS_TIMEOUT bounds it."""
    listeners = []
    for _ in range(2):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listeners.append(listener)
    try:
        raw = delayq_settings("", REDIS_TIMEOUT=0.2)
        del raw["REDIS_URL"]
        raw["REDIS_SENTINEL"] = {
            "SERVICE": "mymaster",
            "NODES": [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners],
        }
        settings.DELAYQ = raw
        connection.reset()
        task = schedule(add, args=[1, 2], delay=30)
        [entry] = OutboxEntry.objects.all()
        assert entry.task_id == task.pk
        # One connection to each silent sentinel, none made again.
        for listener in listeners:
            listener.setblocking(False)
            accepted = []
            with contextlib.suppress(BlockingIOError):
                while True:
                    accepted.append(listener.accept()[0])
            for peer in accepted:
                peer.close()
            assert len(accepted) == 1
    finally:
        connection.reset()
        for listener in listeners:
            listener.close()
