"""``manage.py delayq_status`` shows the names it reads from Redis escaped and
clipped: whoever can write to Redis must not drive the operator's terminal,
forge a line of the report, or bury it under a 100 kB name."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from django_delayq.store.keys import shard_keys, sweepers_key, workers_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

#: Clears the screen, then a NUL, then a line that looks like the report's.
HOSTILE = "web-1\x1b[2J\x00\nWorker fake: default"
HUGE = "w" * 100_000


def status(*args: str) -> str:
    out = io.StringIO()
    with pytest.raises(SystemExit):  # degraded: no loop really runs
        call_command("delayq_status", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def hostile_heartbeats(redis_client):
    alive = int(time.time() * 1000) + 3_600_000  # an hour from now
    redis_client.zadd(
        workers_key("delayq"),
        {
            f"{HOSTILE}#default,or\x1bders".encode(): alive,
            f"{HUGE}#default".encode(): alive,
        },
    )
    redis_client.zadd(sweepers_key("delayq"), {f"{HOSTILE}#30".encode(): alive})
    redis_client.set(shard_keys("delayq", "default", 0).lease, HOSTILE)


def test_names_read_from_redis_are_shown_escaped_and_clipped(hostile_heartbeats):
    text = status()
    assert "\x1b" not in text
    assert "\x00" not in text
    # No line forged by a line break in a name.
    assert not any(line.startswith("Worker fake") for line in text.splitlines())
    escaped = "web-1\\x1b[2J\\x00\\nWorker fake: default"
    assert f"Worker {escaped}: default, or\\x1bders" in text
    assert f"Sweeper {escaped}: every 30 s" in text
    assert f"Dispatcher {escaped}: default:0" in text
    [huge] = [line for line in text.splitlines() if line.startswith("Worker www")]
    assert huge == f"Worker {'w' * 200}...[99,800 more characters]: default"
    assert max(len(line) for line in text.splitlines()) < 400


def test_json_keeps_the_names_exact_and_escaped(hostile_heartbeats):
    text = status("--json")
    assert "\x1b" not in text
    assert "\x00" not in text
    report = json.loads(text)
    assert report["workers"][HOSTILE] == ["default", "or\x1bders"]
    assert report["workers"][HUGE] == ["default"]
