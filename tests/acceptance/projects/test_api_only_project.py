"""A project without the admin: a process that imports only its tasks module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import redis

from django_delayq.models import DelayedTask
from tests.acceptance.processes import Processes
from tests.support.helpers import expected_score, indexed_score
from tools.procs import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import django

    django.setup()

    from tests.testapp.tasks import order_cancel

    # Nothing else of django-delayq was imported: the admin's autodiscovery,
    # which would import the API, is not there.
    before = "django_delayq.api" in sys.modules
    row = order_cancel.schedule(args=[7], delay=600)
    print(json.dumps({"api_before": before, "id": str(row.pk)}))
    """
)


def test_task_schedule_works_in_a_process_that_imported_only_a_tasks_module(
    processes: Processes, redis_client: redis.Redis
):
    env = {**processes.env, "DJANGO_SETTINGS_MODULE": "tests.settings_api_only"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["api_before"] is False
    row = DelayedTask.objects.get(pk=report["id"])
    assert (row.name, row.args, row.status) == (
        "tests.testapp.tasks.order_cancel",
        [7],
        "scheduled",
    )
    assert indexed_score(redis_client, row) == expected_score(row)
