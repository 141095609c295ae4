"""``delayq_worker --processes`` on a Redis whose ``KEY_PREFIX`` another
project holds (delayq.E014): every worker process would be refused, so the
supervisor stops with the reason instead of replacing them forever."""

from __future__ import annotations

import subprocess

import pytest
import redis

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.tasks import add

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

OWNER = "delayq:owner"
THEIRS = "0123456789abcdef"


def test_the_supervisor_stops_when_its_workers_are_refused_the_prefix(
    processes: Processes, redis_client: redis.Redis
) -> None:
    ours = schedule(add, args=[1, 2])
    redis_client.set(OWNER, THEIRS)
    supervisor = processes.start("delayq_worker", "--processes", "2")
    try:
        code = supervisor.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the supervisor kept replacing its refused workers:\n"
            + processes.log(supervisor)[-3000:]
        )
    log = processes.log(supervisor)
    assert code == 1, log
    assert "refused to run; stopping the supervisor" in log
    assert f"belongs to another project (fingerprint {THEIRS}" in log
    assert "CommandError" in log
    assert "(delayq.E014)" in log
    assert "starting another in" not in log  # no worker process replaced
    assert DelayedTask.objects.get(pk=ours.pk).status == Status.SCHEDULED
    assert redis_client.get(OWNER) == THEIRS.encode()
