"""``@shared_task``: a django-delayq task that also answers Celery's calls.

The decorated function is an ordinary django-delayq task (registry, the
row written in the caller's transaction, dedupe keys, priorities, time
limits, flow control, the testing toolkit), of the class
:class:`CeleryTask`, which adds ``delay()``, ``apply_async()``,
``retry()`` and ``request``, and fails and retries as Celery does:

* an exception the function raises fails the task at once, unless it is
  one of ``autoretry_for`` (retried after Celery's backoff) or the task
  raised ``self.retry()``;
* a task retries at most ``max_retries`` times: ``max_retries=N`` is
  ``N + 1`` attempts of the row (Celery counts retries, django-delayq
  counts attempts).

A worker runs it like any task, through :meth:`CeleryTask.run_attempt`:
``self.request`` describes the row of the attempt.
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Callable, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    NoReturn,
    ParamSpec,
    TypeVar,
    cast,
    overload,
)

from django.utils import timezone

from ... import registry
from ...exceptions import InvalidArgument, InvalidSchedule, InvalidTaskDefinition
from ...options import FAIL_NOW, NextAttempt, retry_after
from .attempts import (
    MaxRetriesExceededError,
    NotSupported,
    Request,
    Retry,
    requests_under_way,
)
from .options import CALL_OPTIONS, RetryPolicy, refused_call_option, task_options
from .results import AsyncResult

if TYPE_CHECKING:
    from ...models import DelayedTask


P = ParamSpec("P")
R = TypeVar("R")


class CeleryTask(registry.Task[P, R]):
    """A django-delayq task with Celery's task API."""

    policy: RetryPolicy = RetryPolicy()
    bind: bool = False
    ignore_result: bool = False
    #: Celery's ``expires`` default: seconds (or a timedelta) from each call
    expires: float | datetime.timedelta | None = None

    # -- Celery's attributes -------------------------------------------------

    @property
    def max_retries(self) -> int | None:
        return self.policy.max_retries

    @property
    def default_retry_delay(self) -> float:
        return self.policy.default_retry_delay

    @property
    def request(self) -> Request:
        """The attempt under way in this thread (a direct call's outside a
        worker)."""
        stack = requests_under_way()
        if stack and stack[-1].task == self.name:
            return stack[-1]
        return Request(id=None, task=self.name)

    # -- calling -------------------------------------------------------------------

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as Celery's direct call does."""
        direct = Request(id=None, task=self.name, args=list(args), kwargs=kwargs)
        return cast("R", self._call(direct, args, kwargs))

    def read_signature(self) -> inspect.Signature:
        """The function's, without the task a bound function takes first."""
        signature = super().read_signature()
        if not self.bind:
            return signature
        return signature.replace(parameters=list(signature.parameters.values())[1:])

    def run_attempt(self, row: DelayedTask, limit: float | None) -> Any:
        """Run an attempt of ``row`` (a worker's, or the testing toolkit's),
        with ``self.request`` describing it."""
        value = self._call(Request.of(row), row.args, row.kwargs)
        return None if self.ignore_result else value

    def run(
        self, args: Sequence[Any], kwargs: dict[str, Any], limit: float | None
    ) -> Any:
        """The function called with ``args`` and ``kwargs`` outside an
        attempt, as a direct call is."""
        direct = Request(id=None, task=self.name, args=list(args), kwargs=kwargs)
        value = self._call(direct, args, kwargs)
        return None if self.ignore_result else value

    def _call(
        self, request: Request, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        stack = requests_under_way()
        try:
            stack.append(request)
            # The function as written: a bound one takes the task first.
            function: Callable[..., Any] = self.func
            if self.bind:
                return function(self, *args, **kwargs)
            return function(*args, **kwargs)
        except (Retry, MaxRetriesExceededError, NotSupported):
            raise  # never retried automatically: the code asked for them
        except BaseException as exc:
            if not self.policy.autoretries(exc):
                raise
            retries = self.policy.retry_kwargs.get("max_retries", self.max_retries)
            countdown = self.policy.autoretry_countdown(request.retries)
            raise self.retry(exc=exc, countdown=countdown, max_retries=retries) from exc
        finally:
            if stack and stack[-1] is request:
                stack.pop()

    # -- scheduling ----------------------------------------------------------------

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> AsyncResult:
        """Run as soon as a worker is free: ``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Schedule the task: ``countdown=`` seconds from now or at ``eta=``
        (an aware datetime), on ``queue=``, with ``priority=`` (django-delayq's:
        -100 to 100, higher first), a dedupe ``key=``, ``expires=``
        (seconds from now or an aware datetime; the task's ``expires`` by
        default) and ``headers=`` (the task's metadata, ``meta=``:
        ``self.request.headers`` in its runs). Written in the caller's
        transaction, like
        :func:`django_delayq.schedule`."""
        for option in options:
            if option not in CALL_OPTIONS:
                raise refused_call_option(option, self.name)
        if args is not None and not isinstance(args, list | tuple):
            raise InvalidArgument(
                f"{self.name}.apply_async(): args must be a list or tuple, "
                f"such as args=[7]; got {type(args).__name__}."
            )
        countdown = options.get("countdown")
        if isinstance(countdown, int | float) and not isinstance(countdown, bool):
            countdown = max(countdown, 0)  # as Celery: a past moment runs now
        # As Celery: an expires= given (None included) replaces the task's.
        expires = options.get("expires", self.expires)
        try:
            row = self.schedule(
                args=list(args or ()),
                kwargs=kwargs,
                delay=countdown,
                eta=options.get("eta"),
                expires=expires,
                queue=options.get("queue"),
                priority=options.get("priority"),
                key=options.get("key"),
                meta=options.get("headers"),
            )
        except InvalidSchedule as exc:
            # Every refusal of an expiry names expires= first; one that came
            # from the decorator says so, or the call would not show why.
            if "expires" in options or not str(exc).startswith("expires="):
                raise
            raise InvalidSchedule(
                f"{exc} (expires={self.expires!r} is the default of "
                f"@shared_task on {self.name}; pass apply_async(expires=...) to "
                f"give this call another, or expires=None for none)"
            ) from None
        return AsyncResult(str(row.pk), task=self)

    # -- failures ------------------------------------------------------------------

    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime.datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Run the task again later, as Celery's ``self.retry()`` does:
        after ``countdown`` seconds (``default_retry_delay`` by default) or
        at ``eta``. With no retries left it raises ``exc``, or
        :class:`MaxRetriesExceededError`. Usually written ``raise
        self.retry(...)``."""
        if args is not None or kwargs is not None or options:
            given = ["args"] * (args is not None) + ["kwargs"] * (kwargs is not None)
            raise NotSupported(
                f"{self.name}.retry(): {', '.join([*given, *options])} "
                f"{'is' if len(given) + len(options) == 1 else 'are'} not "
                f"supported: a retry runs the same call again; pass "
                f"countdown=, eta=, exc= or max_retries=."
            )
        if not throw:
            raise NotSupported(
                f"{self.name}.retry(throw=False) is not supported: the retry is "
                f"the outcome of this attempt. Write raise self.retry(...)."
            )
        request = self.request
        if request.called_directly:
            # As Celery: a direct call has nothing to retry.
            raise exc if exc is not None else Retry("Task can be retried", None)
        limit = self.max_retries if max_retries is None else max_retries
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args} "
                f"kwargs:{request.kwargs}: it retried {request.retries} "
                f"time(s), max_retries={limit}."
            )
        raise Retry(exc=exc, when=_seconds_until(eta, countdown, self))

    def next_attempt(
        self, exc: BaseException, attempt: int, max_attempts: int
    ) -> NextAttempt | None:
        """Celery's rule: only a :class:`Retry` retries; anything else fails
        the task. A retry beyond the row's attempts (``retry(max_retries=)``
        above the task's, or ``max_retries=None``) gives it one more."""
        if not isinstance(exc, Retry):
            return FAIL_NOW
        budget = None if attempt < max_attempts else attempt + 1
        return retry_after(exc.seconds(), max_attempts=budget)

    # -- what a bound task may call ------------------------------------------------

    def AsyncResult(self, task_id: str) -> AsyncResult:
        """The result handle of ``task_id``, as ``Task.AsyncResult()``."""
        return AsyncResult(task_id, task=self)

    def update_state(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "update_state()",
            "a task's state is its row's status; write progress to a model of your own",
        )

    def send_event(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "send_event()",
            "connect a receiver to django_delayq.signals (task_started, "
            "task_succeeded, ...)",
        )

    def replace(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("replace()", "schedule the other task and return")

    def add_to_chord(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("add_to_chord()", _CANVAS)

    def subtask(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("subtask()", _CANVAS)

    # -- what Celery has and django-delayq does not --------------------------------

    def _refuse(self, what: str, instead: str) -> NoReturn:
        raise NotSupported(f"{self.name}.{what} is not supported: {instead}.")

    def s(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("s()", _CANVAS)

    def si(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("si()", _CANVAS)

    def map(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "map()", "schedule one task per item (django_delayq.schedule_many)"
        )

    def starmap(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "starmap()", "schedule one task per item (django_delayq.schedule_many)"
        )

    def chunks(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "chunks()", "schedule one task per chunk (django_delayq.schedule_many)"
        )

    def apply(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "apply()",
            "call the function directly, or run scheduled tasks in tests with "
            "django_delayq.testing",
        )


def _seconds_until(
    eta: datetime.datetime | None,
    countdown: float | None,
    task: CeleryTask[Any, Any],
) -> float:
    """Seconds from now until the retry: ``countdown``, or until ``eta`` (a
    naive one is in the current time zone, as Django takes naive times), or
    ``default_retry_delay``."""
    if eta is not None:
        if not isinstance(eta, datetime.datetime):
            raise InvalidArgument(
                f"{task.name}.retry(eta=...) takes a datetime; got {eta!r}."
            )
        if timezone.is_naive(eta):
            eta = timezone.make_aware(eta)
        return max((eta - timezone.now()).total_seconds(), 0.0)
    if countdown is None:
        return task.default_retry_delay
    if isinstance(countdown, bool) or not isinstance(countdown, int | float):
        raise InvalidArgument(
            f"{task.name}.retry(countdown=...) takes a number of seconds; got "
            f"{countdown!r}."
        )
    return max(float(countdown), 0.0)


_CANVAS = (
    "signatures and the canvas (chain, group, chord) are not supported; "
    "schedule the next task at the end of this one"
)


@overload
def shared_task(func: Callable[P, R], /) -> CeleryTask[P, R]: ...


@overload
def shared_task(
    *, bind: Literal[True], **options: Any
) -> Callable[[Callable[Concatenate[Any, P], R]], CeleryTask[P, R]]: ...


@overload
def shared_task(
    *, bind: Literal[False] = ..., **options: Any
) -> Callable[[Callable[P, R]], CeleryTask[P, R]]: ...


def shared_task(
    func: Callable[..., Any] | None = None, /, *args: Any, **options: Any
) -> CeleryTask[Any, Any] | Callable[[Callable[..., Any]], CeleryTask[Any, Any]]:
    """Celery's ``@shared_task``, as a django-delayq task.

    Every option Celery users write is mapped or refused with an error that
    names it (see "Moving from Celery" in the documentation).
    """
    if args:
        raise InvalidTaskDefinition(
            "@shared_task takes its options as keyword arguments, such as "
            "@shared_task(bind=True, max_retries=5)."
        )

    def decorate(fn: Callable[..., Any]) -> CeleryTask[Any, Any]:
        name = getattr(fn, "__qualname__", repr(fn))
        if inspect.iscoroutinefunction(fn):
            raise InvalidTaskDefinition(
                f"@shared_task on {name}: an async def function is not a Celery "
                f"task; use django_delayq's @task, which runs coroutines."
            )
        mapped, policy, bind, ignore_result, expires = task_options(name, options)
        if bind and not _takes_self(fn):
            raise InvalidTaskDefinition(
                f"@shared_task(bind=True) on {name}: the function must take the "
                f"task as its first parameter, such as def {fn.__name__}(self, ...)."
            )
        try:
            built = registry.build(fn, cls=CeleryTask, **mapped)
        except InvalidTaskDefinition as exc:
            # Named as the user wrote it.
            text = str(exc).replace("@task(", "@shared_task(")
            raise InvalidTaskDefinition(f"{text} (on {name})") from None
        assert isinstance(built, CeleryTask)
        built.policy, built.bind, built.ignore_result = policy, bind, ignore_result
        built.expires = expires
        registry.register(built)
        return built

    if func is not None:
        return decorate(func)
    return decorate


def _takes_self(fn: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    return bool(parameters) and parameters[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
