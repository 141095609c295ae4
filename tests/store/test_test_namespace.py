"""A test run's own key namespace: ``test_<KEY_PREFIX>_<hex>`` by default.

This suite runs inside Django's test environment (pytest-django), as a
project's tests do; its settings pin ``TEST_KEY_PREFIX``, which these tests
take away. A project's whole ``manage.py test`` beside its development
processes is tested in tests/acceptance/projects/test_user_project_tests.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.core import checks

from django_delayq import schedule
from django_delayq.conf import get_settings, in_test_run
from django_delayq.store.connection import get_client
from django_delayq.store.namespace import remove_keys
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def default_namespace(settings, redis_client):
    delayq = dict(settings.DELAYQ)
    del delayq["TEST_KEY_PREFIX"]
    settings.DELAYQ = delayq


def test_a_test_run_gets_a_namespace_of_its_own(default_namespace, redis_client):
    assert in_test_run()
    prefix = get_settings().key_prefix
    assert re.fullmatch(r"test_delayq_[0-9a-f]{8}", prefix)
    assert get_settings().key_prefix == prefix  # the same for the whole run

    schedule(add, args=[1, 2], delay=60)
    keys = {key.decode() for key in redis_client.scan_iter()}
    assert f"{prefix}:{{default:0}}:due" in keys
    assert not [key for key in keys if key.startswith("delayq:")]


def test_the_namespace_follows_key_prefix(default_namespace, settings):
    before = get_settings().key_prefix
    settings.DELAYQ = {**settings.DELAYQ, "KEY_PREFIX": "shop"}
    after = get_settings().key_prefix
    assert after == "test_shop_" + before.removeprefix("test_delayq_")


#: Run in a process of its own, single-threaded (forking this test process,
#: whose other tests leave threads behind, could deadlock the child): sets up
#: Django's test environment as its test runner does, then forks the way the
#: library and Django's `test --parallel` do, and prints the prefixes seen.
FORKING = """
import os, sys
import django
django.setup()
from django.conf import settings
import django.test.runner
from django.test.utils import setup_test_environment
settings.DELAYQ = {"REDIS_URL": "redis://127.0.0.1:1/0"}
setup_test_environment()
from django_delayq.conf import get_settings

def in_a_child(parallel_worker):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        if parallel_worker:
            import django.test.runner
            django.test.runner._worker_id = parallel_worker
        os.write(write, get_settings().key_prefix.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        prefix = pipe.read()
    os.waitpid(pid, 0)
    return prefix

print(get_settings().key_prefix, in_a_child(0), in_a_child(2))
"""


def forked_prefixes() -> tuple[str, str, str]:
    """The prefix of a test process, of a process the library forks from it
    (a worker process of `delayq_worker --processes` a test starts), and of
    the second worker of `test --parallel`."""
    done = subprocess.run(
        [sys.executable, "-c", FORKING],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ours, library, worker = done.stdout.split()
    return ours, library, worker


def test_forked_processes_share_the_namespace_and_parallel_workers_get_theirs():
    ours, library, worker = forked_prefixes()
    assert re.fullmatch(r"test_delayq_[0-9a-f]{8}", ours)
    assert library == ours
    assert worker == f"{ours}_2"


def test_test_key_prefix_is_used_as_it_is_and_emptied_at_the_end(settings):
    settings.DELAYQ = {**settings.DELAYQ, "TEST_KEY_PREFIX": "shop-tests"}
    assert get_settings().key_prefix == "shop-tests"
    assert get_settings().temporary_prefix


def test_a_test_key_prefix_equal_to_key_prefix_is_never_emptied(settings):
    """This suite's own setting: its Redis is its own."""
    assert get_settings().key_prefix == "delayq"
    assert not get_settings().temporary_prefix


def test_removing_a_namespace_leaves_other_keys(default_namespace, redis_client):
    redis_client.set("delayq:owner", "the development project")
    redis_client.set("test_delayq_other:owner", "another test run")
    schedule(add, args=[1, 2], delay=60)
    prefix = get_settings().key_prefix

    assert remove_keys(get_client("loop"), prefix) >= 1

    left = sorted(key.decode() for key in redis_client.scan_iter())
    assert left == ["delayq:owner", "test_delayq_other:owner"]


@pytest.mark.parametrize("value", ["", "a{b}", 7])
def test_a_bad_test_key_prefix_is_e007(settings, value):
    settings.DELAYQ = {**settings.DELAYQ, "TEST_KEY_PREFIX": value}
    errors = [m for m in checks.run_checks() if m.id == "delayq.E007"]
    assert len(errors) == 1
    assert 'DELAYQ["TEST_KEY_PREFIX"]' in errors[0].msg
