"""Django's test environment set up outside a test run (Django's tutorial
does it in ``manage.py shell``) is no test run: its tasks go to the real key
namespace, where the development processes find them."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
import redis

from tests.acceptance.processes import Processes
from tools.servers import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


#: Django's tutorial in `manage.py shell`: the test environment set up to
#: use the test client, against the development database and Redis.
SHELL = """
import django
django.setup()
from django.conf import settings
from django.test.utils import setup_test_environment
settings.DELAYQ = {"REDIS_URL": sys.argv[1]}
setup_test_environment()
from django.test import Client
from django_delayq import schedule
from django_delayq.conf import get_settings
task = schedule("tests.testapp.tasks.add", args=[1, 2], delay=3)
print(get_settings().key_prefix, task.pk.hex)
"""


def test_a_shell_with_the_test_environment_schedules_into_the_real_namespace(
    redis_client: redis.Redis, redis_server: RedisServer, processes: Processes
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\n{SHELL}", redis_server.url],
        env=processes.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    prefix, task_id = done.stdout.split()
    assert prefix == "delayq"
    # Indexed where the development processes look, and still there after
    # the shell exited (a test namespace is emptied at exit).
    due = redis_client.zrange("delayq:{default:0}:due", 0, -1)
    assert uuid.UUID(task_id).bytes in due
