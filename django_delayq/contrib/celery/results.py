"""``AsyncResult``: Celery's result handle, as a view of the task's row.

There is no result backend: the row is the result. Each question reads it
again from the database django-delayq writes to (never a replica that may
lag), and the states are Celery's names for the row's status:

========================  ===========
row                       state
========================  ===========
scheduled, never run      ``PENDING``
scheduled after failing   ``RETRY``
running                   ``STARTED``
succeeded                 ``SUCCESS``
failed                    ``FAILURE``
cancelled, or expired     ``REVOKED``
no such row               ``PENDING`` (as Celery says of an unknown id)
========================  ===========
"""

from __future__ import annotations

import builtins
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ... import registry
from ...exceptions import DelayQueueException, InvalidTaskState, TaskNotRegistered
from .attempts import MaxRetriesExceededError, NotSupported, Retry, in_task

if TYPE_CHECKING:
    import datetime

    from ...models import DelayedTask

logger = logging.getLogger(__name__)

# The models are imported where they are used: a settings module imports
# this package (for from_beat_schedule) before the apps are loaded.

PENDING = "PENDING"
RETRY = "RETRY"
STARTED = "STARTED"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
#: The states after which nothing changes.
READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})

#: How long get() sleeps between reads of the row: from the first to at
#: most ``interval``, doubling, so a quick task is seen quickly and a slow
#: one costs a read every ``interval`` seconds.
FIRST_POLL = 0.02


class TimeoutError(builtins.TimeoutError):
    """:meth:`AsyncResult.get` waited ``timeout`` seconds and the task had
    not finished."""


class TaskRevokedError(DelayQueueException):
    """The task was cancelled (revoked) before it ran."""


class TaskFailed(DelayQueueException):
    """A task failed with an exception that cannot be raised again here (not
    a builtin type); ``exc_type`` names it, the message is its text."""

    def __init__(self, exc_type: str, message: str) -> None:
        self.exc_type = exc_type
        super().__init__(f"{exc_type}: {message}" if message else exc_type)


class AsyncResult:
    """A scheduled task, looked at as Celery's ``AsyncResult``."""

    def __init__(
        self, id: str | uuid.UUID, task: registry.Task[..., Any] | str | None = None
    ) -> None:
        self.id = str(id)
        self._task = task

    @property
    def task_id(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        if isinstance(other, str):
            return other == self.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    # -- the row -------------------------------------------------------------------

    def _row(self) -> DelayedTask | None:
        from ...models import DelayedTask, write_db

        try:
            key = uuid.UUID(self.id)
        except ValueError:
            return None
        return DelayedTask.objects.using(write_db()).filter(pk=key).first()

    @property
    def state(self) -> str:
        return _state_of(self._row())

    status = state

    def ready(self) -> bool:
        return self.state in READY_STATES

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    @property
    def result(self) -> Any:
        """The return value once it succeeded; the exception once it failed
        (or of the attempt before, while it waits to retry); else None."""
        row = self._row()
        state = _state_of(row)
        if state == SUCCESS and row is not None:
            return row.result
        if state in (FAILURE, RETRY) and row is not None:
            return _exception_of(row.last_error)
        return None

    info = result

    @property
    def traceback(self) -> str | None:
        row = self._row()
        return row.last_traceback or None if row is not None else None

    @property
    def date_done(self) -> datetime.datetime | None:
        row = self._row()
        return row.finished_at if row is not None else None

    @property
    def name(self) -> str | None:
        row = self._row()
        return row.name if row is not None else None

    # -- waiting and cancelling ------------------------------------------------------

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        disable_sync_subtasks: bool = True,
    ) -> Any:
        """Wait until the task has finished and return its value.

        A failed task raises its error (its builtin type, such as
        ``ValueError``, else :class:`TaskFailed`), a cancelled (or expired)
        one :class:`TaskRevokedError`; with ``propagate=False`` the error is
        returned instead. Past ``timeout`` seconds, :class:`TimeoutError`.
        """
        if disable_sync_subtasks and in_task():
            raise RuntimeError(
                "Never call result.get() within a task: the task would hold a "
                "worker thread while it waits for another. Schedule the next "
                "step at the end of this task instead."
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = FIRST_POLL
        while True:
            row = self._row()
            state = _state_of(row)
            if state in READY_STATES:
                break
            _refuse_waiting_in_vain(self.id, row)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"task {self.id} did not finish within {timeout:g} s "
                    f"(it is {state})."
                )
            wait = (
                pause if deadline is None else min(pause, deadline - time.monotonic())
            )
            time.sleep(max(wait, 0.0))
            pause = min(pause * 2, interval)
        assert row is not None
        if state == SUCCESS:
            self._refuse_ignored()
            return row.result
        error: BaseException = (
            _exception_of(row.last_error)
            if state == FAILURE
            else TaskRevokedError(f"task {self.id} was {_revoked_how(row)}.")
        )
        if propagate:
            raise error
        return error

    wait = get

    def revoke(
        self, terminate: bool = False, signal: Any = None, **options: Any
    ) -> bool:
        """Cancel the task, scheduled or running (:func:`django_delayq.cancel`,
        which stops a running task); True if this call cancelled it."""
        if terminate or signal is not None or options:
            raise NotSupported(
                "revoke(terminate=...) is not supported: revoke() cancels the "
                "task, and its worker stops it if it is running (see "
                "django_delayq.cancel()); no signal can be chosen."
            )
        from ... import changes

        try:
            cancelled = changes.cancel(self.id)
        except InvalidTaskState:
            return False
        if not cancelled and self._row() is None:
            logger.warning(
                "revoke(): there is no task %s here; a task sent to Celery "
                "before the switch is revoked with celery.result.AsyncResult",
                self.id,
            )
        return cancelled

    def forget(self) -> None:
        raise NotSupported(
            "forget() is not supported: the task's row is the result, kept "
            "until DELAYQ['RETENTION'] removes it."
        )

    def _refuse_ignored(self) -> None:
        task: object = self._task
        if task is None or isinstance(task, str):
            name = task if isinstance(task, str) else self.name
            try:
                task = registry.get(name) if name else None
            except TaskNotRegistered:
                task = None
        if getattr(task, "ignore_result", False):
            name = getattr(task, "name", self.name)
            raise InvalidTaskState(
                f"{name} succeeded, and ignores its result (ignore_result=True): "
                f"get() has no value to return. Use state or successful() to "
                f"see whether it ran, or drop ignore_result=True."
            )


def _revoked_how(row: DelayedTask) -> str:
    """What ended a cancelled task: its expiry (the worker that claimed it
    after its ``expires_at`` says so in ``last_error``), or a cancel."""
    if (
        row.expires_at is not None
        and row.finished_at is not None
        and row.finished_at >= row.expires_at
        and row.last_error.startswith("expired at ")
    ):
        return f"not run: it {row.last_error}"
    return "cancelled before it ran"


def _state_of(row: DelayedTask | None) -> str:
    if row is None:
        return PENDING
    if row.status == "scheduled":
        return RETRY if row.attempts and row.last_error else PENDING
    return _STATES[row.status]


#: The row's other statuses (django_delayq.models.Status) as Celery's states.
_STATES = {
    "running": STARTED,
    "succeeded": SUCCESS,
    "failed": FAILURE,
    "cancelled": REVOKED,
}


def _exception_of(error: str) -> BaseException:
    """The exception a failed row's ``last_error`` (``"Type: message"``)
    names: a builtin exception type, or one of this kit's, raised again as
    it was; else :class:`TaskFailed`."""
    exc_type, _, message = error.partition(": ")
    found = _OWN_ERRORS.get(exc_type) or getattr(builtins, exc_type, None)
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            return found(message)
        except TypeError:  # a builtin that takes other arguments
            pass
    return TaskFailed(exc_type, message)


_OWN_ERRORS: dict[str, type[Exception]] = {
    "Retry": Retry,
    "MaxRetriesExceededError": MaxRetriesExceededError,
    "NotSupported": NotSupported,
}


def _refuse_waiting_in_vain(task_id: str, row: DelayedTask | None) -> None:
    """get() would wait for ever: inside the transaction that scheduled the
    task (no worker sees the row before it commits), or in the testing
    toolkit's manual mode (nothing runs a task but run_due())."""
    from ...conf import get_settings
    from ...models import write_db

    if get_settings().test_mode == "manual":
        raise InvalidTaskState(
            f"task {task_id} has not finished, and TEST_MODE is 'manual': "
            f"nothing runs it until the test calls "
            f"django_delayq.testing.run_due(). Call it before get(), or use "
            f'TEST_MODE "immediate" (tasks run when their transaction commits).'
        )
    if row is not None and transaction.get_connection(write_db()).in_atomic_block:
        raise InvalidTaskState(
            f"task {task_id} has not finished, and get() runs inside a database "
            f"transaction: if that transaction scheduled it, no worker can run "
            f"it before the commit. Call get() after the transaction (in tests, "
            f"run the task with django_delayq.testing)."
        )
