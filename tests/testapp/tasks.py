"""Tasks the tests schedule."""

from __future__ import annotations

import contextlib
import datetime
import threading

from django_delayq import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue="orders", max_attempts=5)
def order_cancel(order_id: int) -> None:
    """Stands in for a shop's "cancel the unpaid order" task."""


@task(name="reminders.send")
def send_reminder(user_id: int, *, text: str = "") -> None:
    """Registered under an explicit name."""


@task(max_attempts=3)
def always_fails(message: str) -> None:
    raise RuntimeError(message)


@task
def create_order(status: str) -> int:
    """Writes to the database: its effect must happen exactly once."""
    from tests.testapp.models import Order

    return Order.objects.create(status=status).pk


@task(atomic=False)
def create_order_non_atomic(status: str) -> int:
    from tests.testapp.models import Order

    return Order.objects.create(status=status).pk


@task
def returns_a_set() -> object:
    return {1, 2}


@task(queue="orders")
def record(key: str, seconds: float = 0.0) -> str:
    """Sleep (to look busy), then note this execution in the ledger."""
    import os
    import time

    from django.utils import timezone

    from tests.testapp.models import Ledger

    at = timezone.now()
    time.sleep(seconds)
    Ledger.objects.create(key=key, pid=os.getpid(), at=at)
    return key


_calls: dict[str, int] = {}


@task(max_attempts=3)
def fails_once(key: str) -> str:
    """Raises on its first call for ``key`` (in this process), then succeeds."""
    _calls[key] = _calls.get(key, 0) + 1
    if _calls[key] == 1:
        raise ValueError("first try fails")
    return key


@task(max_attempts=2)
def exits() -> None:
    import sys

    sys.exit(3)


@task(queue="orders", max_attempts=3)
def poison(key: str) -> None:
    """Always raises (fault tests): it writes its ledger row first, which the
    failed attempt must roll back, so a poison task never leaves an effect."""
    import os

    from django.utils import timezone

    from tests.testapp.models import Ledger

    Ledger.objects.create(key=key, pid=os.getpid(), at=timezone.now())
    raise RuntimeError(f"poison {key} always fails")


@task
def raises_on_commit(status: str) -> None:
    """Its work commits, then a callback it registered fails."""
    from django.db import transaction

    from tests.testapp.models import Order

    Order.objects.create(status=status)

    def broken() -> None:
        raise RuntimeError("callback bug")

    transaction.on_commit(broken)


@task
def connection_identity() -> str:
    """Which database session ran this task (to see connections reused)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return f"pid:{cursor.fetchone()[0]}"
    return f"object:{id(connection.connection)}"


@task(max_attempts=2)
def create_order_or_raise(status: str) -> int:
    """Writes an order, then raises for ``status="bad"``: that write must be
    rolled back, and only that one."""
    from tests.testapp.models import Order

    pk = Order.objects.create(status=status).pk
    if status == "bad":
        raise ValueError("bad order")
    return pk


@task(max_attempts=1)
def order_with_pk(pk: int) -> int:
    """Its first statement inserts an order with a given id: one that
    exists makes that very first statement fail."""
    from tests.testapp.models import Order

    return Order.objects.create(pk=pk, status=f"pk{pk}").pk


@task
def counts_then_orders(status: str) -> int:
    """Its first statement iterates over the orders (a server-side cursor on
    PostgreSQL), then it writes one."""
    from tests.testapp.models import Order

    seen = sum(1 for _ in Order.objects.iterator(chunk_size=2))
    Order.objects.create(status=status)
    return seen


@task
def slow_order(status: str, seconds: float) -> int:
    """Writes an order after ``seconds``: longer than a group's budget."""
    import time

    from tests.testapp.models import Order

    time.sleep(seconds)
    return Order.objects.create(status=status).pk


@task(max_attempts=1)
def swallows_db_error(status: str) -> int:
    """Catches a database error without an atomic() of its own: its
    transaction can no longer commit, so it must not count as a success."""
    import contextlib

    from django.db import IntegrityError

    from tests.testapp.models import Order

    order = Order.objects.create(status=status)
    with contextlib.suppress(IntegrityError):
        Order.objects.create(pk=order.pk, status="duplicate")
    return order.pk


#: Keys whose on_commit callback ran (in this process).
committed_keys: list[str] = []


@task(max_attempts=1)
def notes_on_commit(key: str, fail: bool = False) -> None:
    """Registers an on_commit callback, then raises if told to."""
    from django.db import transaction

    transaction.on_commit(lambda: committed_keys.append(key))
    if fail:
        raise RuntimeError(f"{key} fails")


@task(queue="orders")
def gated_record(key: str, gate: str) -> str:
    """Like ``record``, but first waits (bounded) while the file ``gate``
    exists: a fault scenario holds a worker inside a task with it."""
    import os
    import time

    from django.utils import timezone

    from tests.testapp.models import Ledger

    at = timezone.now()
    deadline = time.monotonic() + 60
    while os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    Ledger.objects.create(key=key, pid=os.getpid(), at=at)
    return key


@task(queue="orders", max_attempts=2)
def kills_its_process(key: str) -> None:
    """Ends its worker process outright, as a crash in C code or the kernel's
    out-of-memory killer would: no exception, no cleanup."""
    import os

    os._exit(1)


@task(time_limit=0.3, max_attempts=2)
def spins(status: str) -> None:
    """Writes an order, then loops in Python until its time limit stops it:
    that write must be rolled back with the interrupted attempt."""
    import time

    from tests.testapp.models import Order

    Order.objects.create(status=status)
    while True:
        time.sleep(0.01)


@task(time_limit=0.5, max_attempts=1)
def holds_the_gil(seconds: int) -> None:
    """Blocks in C code *holding the GIL*, as a regular expression that
    backtracks without end does: not even the worker's watchdog thread runs."""
    import ctypes

    ctypes.PyDLL(None).sleep(seconds)


@task(time_limit=0.5, max_attempts=2)
def blocks(seconds: float) -> None:
    """Blocks in C code (one long sleep), where no interruption reaches it."""
    import time

    time.sleep(seconds)


@task(max_attempts=1)
def checks_for_cancel(seconds: float = 60.0) -> str:
    """Waits, checking for a cancel between naps (raise_if_cancelled())."""
    import time

    from django_delayq import raise_if_cancelled

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        raise_if_cancelled()
        time.sleep(0.02)
    return "not cancelled"


@task(max_attempts=1)
def writes_once_cancelled(status: str, seconds: float = 60.0) -> int:
    """Waits until its run is cancelled, then writes an order and returns as
    if nothing happened: the order must be rolled back with the run. (It
    writes only then: on SQLite a transaction that has written holds the
    database's only write lock, which the cancel would wait for.)"""
    import time

    from django_delayq import current_run
    from tests.testapp.models import Order

    run = current_run()
    assert run is not None
    end = time.monotonic() + seconds
    while not run.cancelled and time.monotonic() < end:
        time.sleep(0.02)
    return Order.objects.create(status=status).pk


@task(max_attempts=1)
def ignores_cancel(seconds: float = 60.0) -> str:
    """Loops in Python without checking for a cancel: only the forced stop
    ends it."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)
    return "not stopped"


@task(max_attempts=1)
def blocks_through_cancel(seconds: float) -> None:
    """Blocks in one C call, where no interruption reaches it: a cancel
    costs its process."""
    import time

    time.sleep(seconds)


@task(max_attempts=1)
def raises_at_length(chars: int) -> None:
    """Fails with an error message of ``chars`` characters, deep in a stack."""

    def dig(depth: int) -> None:
        if depth == 0:
            raise ValueError("start " + "x" * chars + " end")
        dig(depth - 1)

    dig(50)


@task
def returns_text(chars: int) -> str:
    return "r" * chars


# Django's Tasks framework's tasks of this app: workers resolve them only
# from modules already imported, and they import tasks modules only. One
# test runs without the framework, where that module cannot be imported.
with contextlib.suppress(ImportError):
    from tests.testapp import django_tasks  # noqa: F401


@task(priority=50)
def urgent() -> None:
    """A task that starts before the normal ones due with it."""


@task(max_attempts=3)
def measures(value: object) -> int:
    """Raises TypeError in its body for a value without a length."""
    return len(value)  # type: ignore[arg-type]


@task
def takes_anything(*args: object, **kwargs: object) -> None:
    """Any arguments fit: for the tests of how arguments are stored."""


@task(max_attempts=2)
async def async_create_order(status: str) -> int:
    """Writes an order through Django's async ORM, then raises for
    ``status="bad"``: that write must be rolled back with the attempt."""
    from tests.testapp.models import Order

    order = await Order.objects.acreate(status=status)
    if status == "bad":
        raise ValueError("bad order")
    return order.pk


@task(max_attempts=1)
async def async_writes_through_sync_code(status: str) -> dict[str, object]:
    """Writes an order through ``sync_to_async`` and tells on which thread,
    and whether in a transaction; raises for ``status="bad"``."""
    import threading

    from asgiref.sync import sync_to_async
    from django.db import connection

    from tests.testapp.models import Order

    def write() -> dict[str, object]:
        Order.objects.create(status=status)
        return {
            "thread": threading.get_ident(),
            "in_atomic_block": connection.in_atomic_block,
        }

    seen = await sync_to_async(write, thread_sensitive=True)()
    if status == "bad":
        raise ValueError("bad order")
    return seen


@task(atomic=False, max_attempts=1)
async def async_create_order_non_atomic(status: str) -> int:
    """As :func:`async_create_order`, outside a transaction."""
    from tests.testapp.models import Order

    order = await Order.objects.acreate(status=status)
    if status == "bad":
        raise ValueError("bad order")
    return order.pk


@task(time_limit=0.3, max_attempts=2)
async def async_waits(status: str) -> None:
    """Writes an order, then awaits far longer than its time limit: the
    write must be rolled back with the interrupted attempt."""
    import asyncio

    from tests.testapp.models import Order

    await Order.objects.acreate(status=status)
    await asyncio.sleep(60)


@task(max_attempts=1)
async def async_schedules(order_id: int) -> str:
    """Schedules another task with ``aschedule()`` from inside its own
    attempt, then raises for ``order_id=0``."""
    from django_delayq import aschedule

    follow_up = await aschedule(order_cancel, args=[order_id], delay=900)
    if order_id == 0:
        raise ValueError("no order")
    return str(follow_up.pk)


# Periodic schedules' functions: not decorated here, so that no dispatcher of
# the suite plans them; a test declares a schedule of them with @periodic or
# DELAYQ["PERIODIC"].


def record_tick(tick: datetime.datetime, label: str = "") -> None:
    """Note this run of a tick in the ledger, keyed by ``label`` and the
    tick's time."""
    import os

    from django.utils import timezone

    from django_delayq.recurring.ticks import tick_text
    from tests.testapp.models import Ledger

    Ledger.objects.create(
        key=f"{label}{tick_text(tick)}", pid=os.getpid(), at=timezone.now()
    )


def count_run() -> None:
    """Note a run of a schedule whose function takes no tick."""
    import os

    from django.utils import timezone

    from tests.testapp.models import Ledger

    Ledger.objects.create(key="count_run", pid=os.getpid(), at=timezone.now())


#: Set by ``updates_in_order`` once it holds its first row's lock, for a
#: test that makes it a deadlock's victim.
holds_first_row = threading.Event()


@task
def updates_in_order(first: int, second: int) -> None:
    """Update the order ``first``, then ``second``: with another transaction
    taking them the other way round, a deadlock."""
    from tests.testapp.models import Order

    Order.objects.filter(pk=first).update(status="first")
    holds_first_row.set()
    Order.objects.filter(pk=second).update(status="second")


@task(max_attempts=3, meta={"team": "billing", "tenant": "default"})
def reads_meta(key: str, fail_first: bool = False) -> dict[str, object]:
    """Return what its run sees: the task's metadata, and the request id the
    run's middleware put back (tests.testapp.middleware.RequestId). With
    ``fail_first``, its first attempt for ``key`` (in this process) raises
    instead."""
    from django_delayq import current_run
    from tests.testapp.middleware import request_id

    run = current_run()
    assert run is not None
    _calls[key] = _calls.get(key, 0) + 1
    if fail_first and _calls[key] == 1:
        raise ValueError("first try fails")
    return {"meta": dict(run.meta), "request_id": request_id.get()}
