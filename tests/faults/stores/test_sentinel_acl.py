"""Redis Sentinel with least-privilege ACL users, in plaintext and over TLS.

Real sentinels and data nodes whose default users need a password: the
data nodes also have the documented least-privilege user, the sentinels a
user that may only list the primaries they monitor, and the settings log in
as those two (``USERNAME``, ``SENTINEL_USERNAME``). Over TLS every server
asks its clients for a certificate of the test's CA, so a task only gets
through if the TLS options reach both the sentinels' connections and the
primary's."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import MasterNotFoundError

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask
from django_delayq.store import connection
from django_delayq.worker import Worker
from tests.support.redis_acl import (
    create_sentinel_user,
    create_user,
    sentinel_acl_rules,
)
from tests.testapp.tasks import add
from tools.servers.redis import TlsFiles
from tools.servers.sentinel import SERVICE, SentinelSet

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]

ADMIN_PASSWORD = "admin-s3cret"
USER, PASSWORD = "delayq", "app-s3cret"
SENTINEL_USER, SENTINEL_PASSWORD = "delayq-sentinel", "sentinel-s3cret"


def start(tls: TlsFiles | None) -> SentinelSet:
    """A sentinel set-up whose every server needs ``ADMIN_PASSWORD``."""
    return SentinelSet(password=ADMIN_PASSWORD, tls=tls).start()


def acl_settings(sentinels: SentinelSet, **extra: Any) -> dict[str, Any]:
    """``DELAYQ`` logged in as the ACL users (database 1, so that the
    connections also need SELECT)."""
    return {
        "REDIS_SENTINEL": {
            "SERVICE": SERVICE,
            "NODES": sentinels.nodes,
            "DB": 1,
            "USERNAME": USER,
            "PASSWORD": PASSWORD,
            "SENTINEL_USERNAME": SENTINEL_USER,
            "SENTINEL_PASSWORD": SENTINEL_PASSWORD,
            **extra,
        },
        "QUEUES": {"orders": {"shards": 4}, "reports": {}},
        "TEST_KEY_PREFIX": "delayq",
        # A TLS handshake on a busy test machine may take longer than the
        # default quarter of a second.
        "REDIS_TIMEOUT": 5.0,
    }


def add_users(sentinels: SentinelSet) -> None:
    """The documented users, on every data node and every sentinel (Redis
    replicates no ACL)."""
    prefix = get_settings().key_prefix
    for server in sentinels.servers:
        with server.client() as admin:
            create_user(admin, USER, PASSWORD, prefix)
    for sentinel in sentinels.sentinels:
        with sentinel.client() as admin:
            create_sentinel_user(admin, SENTINEL_USER, SENTINEL_PASSWORD)


def denials(sentinels: SentinelSet) -> list[str]:
    """What any running server or sentinel refused (``ACL LOG``), as
    ``port: user: reason object``."""
    found = []
    for server in [*sentinels.servers, *sentinels.sentinels]:
        if not server.is_running():
            continue
        with server.client() as admin:
            entries = admin.execute_command("ACL", "LOG")
        found += [
            f"{server.port}: {entry[b'username'].decode()}: "
            f"{entry[b'reason'].decode()} {entry[b'object'].decode()}"
            for entry in entries
        ]
    return found


def run_one_task() -> None:
    """Schedule, dispatch, claim and run a task through the real client."""
    task = schedule(add, args=[2, 3], queue="orders")
    assert Dispatcher().run(once=True).moved == 1
    assert Worker(queues=["orders"]).run(once=True).processed == 1
    assert DelayedTask.objects.get(pk=task.pk).result == 5


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles.generate(tmp_path_factory.mktemp("tls"))


@contextmanager
def started(tls: TlsFiles | None) -> Iterator[SentinelSet]:
    """A Sentinel set-up with the documented users."""
    sentinels = start(tls)
    try:
        add_users(sentinels)
        yield sentinels
    finally:
        sentinels.close()


@contextmanager
def configured(settings: Any, sentinels: SentinelSet) -> Iterator[SentinelSet]:
    """DELAYQ pointed at ``sentinels``, whose ACL logs start empty."""
    for server in [*sentinels.servers, *sentinels.sentinels]:
        if server.is_running():
            with server.client() as admin:
                admin.execute_command("ACL", "LOG", "RESET")
    settings.DELAYQ = acl_settings(sentinels)
    connection.reset()
    try:
        yield sentinels
    finally:
        connection.reset()


# A set-up takes seconds (replication, the sentinels' agreement): the tests
# that leave it as they found it share one per kind.
@pytest.fixture(scope="module")
def plain_set() -> Iterator[SentinelSet]:
    with started(None) as sentinels:
        yield sentinels


@pytest.fixture(scope="module")
def tls_set(tls: TlsFiles) -> Iterator[SentinelSet]:
    with started(tls) as sentinels:
        yield sentinels


@pytest.fixture
def plain_sentinels(settings: Any, plain_set: SentinelSet) -> Iterator[SentinelSet]:
    with configured(settings, plain_set) as sentinels:
        yield sentinels


@pytest.fixture
def tls_sentinels(settings: Any, tls_set: SentinelSet) -> Iterator[SentinelSet]:
    with configured(settings, tls_set) as sentinels:
        yield sentinels


@pytest.fixture
def tls_sentinels_to_fail(settings: Any, tls: TlsFiles) -> Iterator[SentinelSet]:
    """A set-up of its own, for a test that kills its primary."""
    with started(tls) as fresh, configured(settings, fresh) as sentinels:
        yield sentinels


def test_a_task_runs_as_the_least_privileged_users_of_sentinels_and_servers(
    plain_sentinels: SentinelSet, transactional_db: None
) -> None:
    run_one_task()
    # Nothing was refused, and the task's keys are in database 1 of the
    # primary, written as the ACL user.
    assert denials(plain_sentinels) == []
    with plain_sentinels.primary().client() as admin:
        admin.select(1)  # type: ignore[no-untyped-call]
        assert admin.keys("delayq:*")
    with plain_sentinels.primary().client() as admin:
        clients = admin.client_list()
    assert {c["user"] for c in clients if c["db"] == "1"} == {USER}


def test_a_sentinel_user_without_its_password_is_refused(
    plain_sentinels: SentinelSet, settings: Any, transactional_db: None
) -> None:
    settings.DELAYQ = acl_settings(plain_sentinels, SENTINEL_PASSWORD="wrong")
    connection.reset()
    # Every sentinel refuses the login, so none names the primary.
    with pytest.raises(MasterNotFoundError, match="AuthenticationError"):
        connection.get_client().ping()
    refused = {entry.rpartition(" ")[0] for entry in denials(plain_sentinels)}
    assert refused == {
        f"{sentinel.port}: {SENTINEL_USER}: auth"
        for sentinel in plain_sentinels.sentinels
    }


def test_a_task_runs_over_tls_as_the_least_privileged_users(
    tls_sentinels: SentinelSet, tls: TlsFiles, settings: Any, transactional_db: None
) -> None:
    # The files as a project often gives them: pathlib paths.
    settings.DELAYQ = acl_settings(
        tls_sentinels,
        SSL=True,
        SSL_CA_CERTS=tls.ca,
        SSL_CERTFILE=tls.client_cert,
        SSL_KEYFILE=tls.client_key,
    )
    connection.reset()
    run_one_task()
    assert denials(tls_sentinels) == []
    # The sentinels hand out the primary's TLS port, which a plain client
    # cannot use.
    port = tls_sentinels.primary().announced_port
    assert port != tls_sentinels.primary().port
    with (
        pytest.raises(redis.ConnectionError),
        redis.Redis(port=port, socket_timeout=2) as plain,
    ):
        plain.ping()


def test_over_tls_the_users_follow_a_failover(
    tls_sentinels_to_fail: SentinelSet, settings: Any, transactional_db: None
) -> None:
    """The primary killed: the sentinels promote the replica over TLS, and
    name it to the sentinels' user, and the same users work on it."""
    sentinels = tls_sentinels_to_fail
    settings.DELAYQ = acl_settings(sentinels, **sentinels.settings_tls())
    connection.reset()
    run_one_task()
    old = sentinels.kill_primary()
    sentinels.wait_for_failover(old)
    # New connections: those to the killed primary are gone with it.
    connection.reset()
    run_one_task()
    assert sentinels.primary() is not old
    assert denials(sentinels) == []


@pytest.mark.parametrize(
    "missing",
    [
        # The servers' certificates cannot be verified (the system's CAs
        # do not know the test's CA).
        "SSL_CA_CERTS",
        # The servers ask for a client certificate.
        "SSL_CERTFILE",
    ],
)
def test_over_tls_each_option_is_needed(
    tls_sentinels: SentinelSet,
    tls: TlsFiles,
    settings: Any,
    transactional_db: None,
    missing: str,
) -> None:
    options: dict[str, Any] = {
        "SSL": True,
        "SSL_CA_CERTS": str(tls.ca),
        "SSL_CERTFILE": str(tls.client_cert),
        "SSL_KEYFILE": str(tls.client_key),
    }
    del options[missing]
    if missing == "SSL_CERTFILE":
        del options["SSL_KEYFILE"]
    settings.DELAYQ = acl_settings(tls_sentinels, **options)
    connection.reset()
    # redis-py says no more than that no sentinel could be reached.
    with pytest.raises(MasterNotFoundError, match="network:ConnectionError"):
        connection.get_client().ping()


def test_a_relative_ca_path_is_read_from_the_current_directory(
    tls_sentinels: SentinelSet,
    tls: TlsFiles,
    settings: Any,
    transactional_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tls.ca.parent)
    settings.DELAYQ = acl_settings(
        tls_sentinels,
        SSL=True,
        SSL_CA_CERTS=os.path.basename(tls.ca),
        SSL_CERTFILE=tls.client_cert,
        SSL_KEYFILE=tls.client_key,
    )
    connection.reset()
    assert connection.get_client().ping()


def test_the_documented_sentinel_acl_is_the_one_tested() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    block = re.search(
        r"```\{code-block\} text\n:name: sentinel-acl-setuser\n\n(.*?)```", text, re.S
    )
    assert block is not None, "docs/security.md lost its sentinel-acl-setuser block"
    assert block[1].split() == ["ACL", "SETUSER", "delayq", *sentinel_acl_rules()]
