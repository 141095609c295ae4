"""§6: whatever is forged into Redis never runs code: a pickle blob, an id
with no row, extra fields, a row naming an unregistered function, garbage
in a due-set. Each is dead-lettered or dropped; real tasks are unaffected."""

from __future__ import annotations

import os
import pickle
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from django_delayq.ids import shard_of, uuid7
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import shard_keys
from tests.faults.harness import Rig, schedule_records
from tests.faults.invariants import Expect, check
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


class _Exploit:
    """Unpickling this runs a shell command that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


def forged_row(name: str) -> DelayedTask:
    task_id = uuid7()
    return DelayedTask.objects.create(
        id=task_id,
        name=name,
        queue="orders",
        shard=shard_of(task_id, 4),
        args=["forged"],
        run_at=timezone.now(),
    )


def test_forged_stream_entries_never_execute(rig: Rig, tmp_path: Path) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    batch = schedule_records("real", 50, delay=lambda i: 0.3 + i * 0.02)

    pwned = tmp_path / "pwned"
    blob = pickle.dumps(_Exploit(pwned))
    unregistered = forged_row("os.system")
    unknown = forged_row("not.a.registered.task")
    ready = [shard_keys("delayq", "orders", n).ready for n in range(4)]
    client = rig.client
    forged = {
        "pickle blob as the id": (ready[0], {"id": blob}),
        "pickle blob as an extra field": (
            ready[1],
            {"id": uuid.uuid4().bytes, "payload": blob},
        ),
        "id without a row": (ready[2], {"id": uuid.uuid4().bytes}),
        "no id at all": (ready[3], {"task": b"tests.testapp.tasks.record"}),
        "row naming os.system": (
            ready[unregistered.shard],
            {"id": unregistered.pk.bytes},
        ),
        "row naming an unknown task": (ready[unknown.shard], {"id": unknown.pk.bytes}),
    }
    for stream, fields in forged.values():
        client.xadd(stream, fields)
    # Garbage in a due-set: moved like any id, then dead-lettered (or removed
    # by the sweeper first).
    client.zadd(shard_keys("delayq", "orders", 0).due, {blob: 0, b"short": 0})

    dead = [shard_keys("delayq", "orders", n).dead for n in range(4)]

    def dead_letters() -> int:
        return sum(client.xlen(stream) for stream in dead)

    wait_for(
        lambda: dead_letters() >= len(forged), 30, "every forged entry dead-lettered"
    )
    for row in (unregistered, unknown):
        wait_for(
            lambda row=row: DelayedTask.objects.get(pk=row.pk).status == Status.FAILED,
            30,
            f"the {row.name} row failed",
        )

    expect = Expect(committed=batch.keys, rolled_back=batch.rolled_back)
    check(
        rig,
        "forged stream entries",
        expect,
        notes=f"{dead_letters()} dead letters for {len(forged)} forged entries "
        f"and 2 garbage due-set members",
    )
    assert not pwned.exists(), "a forged pickle was unpickled"
    for row in (unregistered, unknown):
        reloaded = DelayedTask.objects.get(pk=row.pk)
        assert "not registered" in reloaded.last_error
        assert reloaded.result is None
    reasons = {
        fields[b"reason"].decode()
        for stream in dead
        for _, fields in client.xrange(stream)
    }
    assert all(reasons), reasons
