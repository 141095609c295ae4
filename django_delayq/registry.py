"""The ``@task`` decorator and the registry of task names.

Only functions registered here can ever run: a worker resolves the name stored
on a task row through :func:`get` and nothing else, so a forged name cannot
import or call arbitrary code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, Unpack, overload

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction

from .conf.limits import KeyFunction, Rule, key_function, parse_rate
from .exceptions import (
    InvalidTaskDefinition,
    TaskNotRegistered,
    TimeLimitExceeded,
)
from .options import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from .options import TASK_OPTIONS, ScheduleOptions, TaskOptions
from .options import validate_max_attempts as validate_max_attempts
from .options import validate_priority as validate_priority

if TYPE_CHECKING:
    from .models import DelayedTask
    from .options import NextAttempt

P = ParamSpec("P")
R = TypeVar("R")


#: Call shapes whose binding a task keeps (see Task.argument_problem).
_SHAPES_KEPT = 32


class Task(Generic[P, R]):
    """A registered task function and its options.

    Calling the object calls the function directly, in this process; use
    :meth:`schedule` (or :func:`django_delayq.schedule`) to run it later.
    Of an ``async def`` function, the call returns its coroutine, to await.
    """

    def __init__(
        self,
        func: Callable[P, R],
        name: str,
        queue: str | None = None,
        max_attempts: int | None = None,
        atomic: bool = True,
        time_limit: float | None = None,
        priority: int = 0,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        limit_by: str | Callable[..., Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.func = func
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.atomic = atomic
        self.time_limit = time_limit
        self.priority = priority
        self.concurrency_limit = concurrency_limit
        self.rate_limit = rate_limit
        self.limit_by = limit_by
        #: the metadata every call of the task gets, under the call's own
        #: (checked by ``@task``: a dict of JSON, or None)
        self.meta = meta
        #: the limits this task declares (see django_delayq.limits)
        self.limit_rule = Rule(concurrency_limit, parse_rate(rate_limit, "rate_limit"))
        #: the key its limits are counted per, from a call's arguments
        self.limit_key: KeyFunction | None = (
            None
            if limit_by is None
            else key_function(func, limit_by, where="@task(limit_by=...)")
        )
        functools.update_wrapper(self, func)
        if iscoroutinefunction(func):  # for async_to_sync(), Django and asyncio
            markcoroutinefunction(self)

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    @property
    def options(self) -> TaskOptions:
        """The ``@task`` options of this task."""
        return TaskOptions(**{option: getattr(self, option) for option in TASK_OPTIONS})

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    @functools.cached_property
    def signature(self) -> inspect.Signature | None:
        """The signature calls are checked against, read once; None where it
        cannot be read (a builtin), and then every call is accepted."""
        try:
            return self.read_signature()
        except (TypeError, ValueError):
            return None

    def read_signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @functools.cached_property
    def _problems(self) -> dict[tuple[int, tuple[str, ...]], str | None]:
        return {}

    def argument_problem(
        self, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> str | None:
        """Why ``args`` and ``kwargs`` cannot call the function, as Python
        would say it; None if they fit its signature.

        Whether a call binds depends only on how many positional arguments
        it passes and which keywords, so the answer is kept per such shape
        (a few of them): ``schedule_many()`` of thousands of calls of one
        shape binds once.
        """
        shape = (len(args), tuple(kwargs))
        known = self._problems
        if shape in known:
            return known[shape]
        problem = self._bind_problem(args, kwargs)
        if len(known) < _SHAPES_KEPT:
            known[shape] = problem
        return problem

    def _bind_problem(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
        signature = self.signature
        if signature is None:
            return None
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            function = getattr(self.func, "__name__", self.name)
            problem = str(exc)
            if problem.startswith("multiple values"):
                problem = f"got {problem}"
            elif problem == "too many positional arguments":
                kinds = [p.kind for p in signature.parameters.values()]
                takes = sum(kind in _POSITIONAL for kind in kinds)
                problem = (
                    f"takes {takes} positional argument{'s' * (takes != 1)} "
                    f"but {len(args)} {'was' if len(args) == 1 else 'were'} given"
                )
            return f"{function}() {problem}; it is {function}{_plain(signature)}"
        return None

    def row_problem(
        self, args: Sequence[Any], kwargs: dict[str, Any], key: str | None
    ) -> str | None:
        """Why a row of this task with these arguments and dedupe key must
        not run at all, though they fit the function; None if it may.

        Every registered task may run any row that fits its signature; the
        task of a ``DELAYQ["PERIODIC"]`` entry runs only its schedule's
        ticks. ``schedule()`` refuses such a row, and a worker that reads
        one (written by hand in the table) fails it without calling the
        function.
        """
        return None

    def next_attempt(
        self, exc: BaseException, attempt: int, max_attempts: int
    ) -> NextAttempt | None:
        """What the failure of ``attempt`` (of ``max_attempts``) with ``exc``
        leads to; None for the default: a retry after the backoff while
        attempts are left, else the task fails. Task classes override it
        (see :class:`~django_delayq.options.NextAttempt`)."""
        return None

    def schedule(self, **options: Unpack[ScheduleOptions]) -> DelayedTask:
        """Schedule this task; ``options`` as for :func:`django_delayq.schedule`."""
        # Imported here, as Django's Task.get_backend() imports its backends:
        # api imports this module, and the models, which a tasks module
        # imported while apps load must not import yet.
        from .api import schedule

        return schedule(self, **options)

    async def aschedule(self, **options: Unpack[ScheduleOptions]) -> DelayedTask:
        """:meth:`schedule` from async code (see :func:`django_delayq.aschedule`)."""
        from .api import aschedule  # as schedule() above

        return await aschedule(self, **options)

    def run_attempt(self, row: DelayedTask, limit: float | None) -> Any:
        """Run the function for an attempt of ``row``, as a worker does:
        :meth:`run` with the row's arguments. A task class that needs the
        attempt itself (its id, its attempt number) overrides this."""
        return self.run(row.args, row.kwargs, limit)

    def run(
        self, args: Sequence[Any], kwargs: dict[str, Any], limit: float | None
    ) -> Any:
        """Call the function as a worker does and return its value.

        A worker thread calls a task's function inside the task's transaction
        (``atomic=True``) or its savepoint in a group. An ``async def``
        function is run to its end by asgiref's ``async_to_sync``: the
        coroutine runs on an event loop in a thread of its own while the
        worker thread waits and serves its thread-sensitive calls, so
        ``sync_to_async(..., thread_sensitive=True)`` and Django's async ORM
        methods run on the worker thread's connection, in the task's
        transaction: what the coroutine writes commits or rolls back with the
        attempt, as a sync task's writes do. It is awaited for at most
        ``limit`` seconds.
        """
        if not iscoroutinefunction(self.func):
            return self.func(*args, **kwargs)
        return async_to_sync(_within)(self.func, args, kwargs, limit)


async def _within(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    limit: float | None,
) -> Any:
    """Await ``func(*args, **kwargs)``; past ``limit`` seconds, cancel it and
    raise :class:`TimeLimitExceeded`.

    The watchdog's interruption cannot stop a coroutine: it is raised in the
    worker thread, which waits on a lock for the coroutine and would see it
    only when the coroutine calls back or ends. Cancelling the coroutine on
    its own loop stops it at its next ``await``, as the watchdog stops a
    function at its next instruction.
    """
    if limit is None:
        return await func(*args, **kwargs)
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await func(*args, **kwargs)
    except TimeoutError:
        if deadline.expired():
            raise TimeLimitExceeded from None
        raise  # the task's own timeout, not its time limit


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations: the names are what matter."""
    empty = inspect.Parameter.empty
    return signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )


_POSITIONAL = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
)

_registry: dict[str, Task[Any, Any]] = {}
_lock = threading.Lock()
_autodiscovered = False
#: Consulted in order by :func:`get` for a name that is not registered.
_fallbacks: list[Callable[[str], Task[Any, Any] | None]] = []


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    atomic: bool = True,
    time_limit: float | None = None,
    priority: int = 0,
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
    limit_by: str | Callable[..., Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    atomic: bool = True,
    time_limit: float | None = None,
    priority: int = 0,
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
    limit_by: str | Callable[..., Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Register a function as a delayed task, as ``@task`` or ``@task(...)``.

    :param name: the registered name; defaults to the function's dotted path
        (``module.qualname``), which is what task rows store.
    :param queue: the queue the task is scheduled on unless ``schedule()``
        names one; defaults to ``"default"``. Checked against ``DELAYQ``
        by the system checks and by ``schedule()``, never at import time.
    :param max_attempts: how many times a failing task runs before it is
        marked failed; defaults to ``DELAYQ["MAX_ATTEMPTS"]``.
    :param atomic: run the function and record its success in one database
        transaction (the default). A task whose effects are only database
        writes then takes effect exactly once, even when a worker dies or is
        paused mid-task. Pass ``atomic=False`` for long tasks or tasks with
        effects outside the database: they run outside a transaction and may
        run again after a worker dies mid-task (at least once).
    :param time_limit: seconds one run may take; defaults to
        ``DELAYQ["TIME_LIMIT"]`` (no limit unless set). Past it the attempt
        fails with :class:`~django_delayq.exceptions.TimeLimitExceeded`
        and is retried like any failure; a worker that cannot interrupt the
        function is replaced (see docs/guide/execution.md).
    :param priority: the task's priority unless ``schedule()`` names one,
        an integer from -100 to 100 (default 0): among due tasks, a higher
        priority band starts first (see docs/guide/scheduling.md).
    :param concurrency_limit: at most this many of the task running at once,
        over every worker process and host (see docs/guide/flow-control.md).
    :param rate_limit: at most this many starts per second, minute or hour
        over every worker: ``"100/s"``, ``"10/m"``, ``"500/h"``.
    :param limit_by: count the limits per value of this parameter of the
        function, or per value a function of the task's arguments returns
        (a str): ``limit_by="order_id"``, ``limit_by=lambda sender, text: sender``.
    :param meta: metadata every call of the task is scheduled with (a dict
        with str keys and JSON values, at most 4 KiB of JSON); a call's
        ``meta=`` is merged over it, its keys winning (see
        docs/guide/scheduling.md).
    """

    def decorate(fn: Callable[P, R]) -> Task[P, R]:
        registered = build(
            fn,
            name=name,
            queue=queue,
            max_attempts=max_attempts,
            atomic=atomic,
            time_limit=time_limit,
            priority=priority,
            concurrency_limit=concurrency_limit,
            rate_limit=rate_limit,
            limit_by=limit_by,
            meta=meta,
        )
        register(registered)
        return registered

    if func is not None:
        return decorate(func)
    return decorate


def build(
    fn: Callable[P, R],
    *,
    cls: type[Task[Any, Any]] = Task,
    **options: Any,
) -> Task[P, R]:
    """Validate ``@task``'s ``options`` (see :class:`TaskOptions`) and return
    the (unregistered) task."""
    if isinstance(fn, Task):
        raise InvalidTaskDefinition(f"{fn.name} is already a task; apply @task once.")
    if not inspect.isfunction(fn):
        raise InvalidTaskDefinition(
            f"@task needs a module-level function, got {type(fn).__name__}."
        )
    given = TaskOptions(**options)
    if given.name is None:
        if "<" in fn.__qualname__:  # <lambda>, <locals>
            raise InvalidTaskDefinition(
                f"@task cannot register {fn.__qualname__!r}: a worker must be "
                f"able to import it. Define the function at module level, or "
                f"pass name=... explicitly."
            )
        given = dataclasses.replace(given, name=f"{fn.__module__}.{fn.__qualname__}")
    try:
        return cls(fn, **given.checked().arguments())
    except TypeError as exc:  # limit_by that does not fit the function
        if isinstance(exc, InvalidTaskDefinition):
            raise
        raise InvalidTaskDefinition(str(exc)) from None


def register(registered: Task[Any, Any]) -> None:
    """Add a task to the registry.

    Re-registering the same function (a module reloaded by the autoreloader)
    replaces the entry; a *different* function under a taken name is an error,
    because rows already stored under that name would run the wrong code.
    """
    with _lock:
        existing = _registry.get(registered.name)
        if existing is not None and _origin(existing) != _origin(registered):
            raise InvalidTaskDefinition(
                f"Task name {registered.name!r} is already registered for "
                f"{_origin(existing)}; pass a different name=... to @task."
            )
        _registry[registered.name] = registered


def _origin(registered: Task[Any, Any]) -> str:
    return f"{registered.func.__module__}.{registered.func.__qualname__}"


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def all_tasks() -> dict[str, Task[Any, Any]]:
    return dict(_registry)


def autodiscover() -> None:
    """Import every installed app's ``tasks`` module, once per process.

    As the admin does for ``admin`` modules; the workers, the system checks
    and a by-name lookup that misses call it.
    """
    global _autodiscovered
    if not _autodiscovered:
        from django.utils.module_loading import autodiscover_modules

        autodiscover_modules("tasks")
        _autodiscovered = True


def get(name: str) -> Task[Any, Any]:
    """Return the task registered under ``name``.

    On a miss, :func:`autodiscover` tasks modules and look again, so
    scheduling by name works in a process that has not imported the task's
    module yet; then ask the resolvers added with :func:`add_fallback`.
    """
    found = _registry.get(name)
    if found is None:
        autodiscover()
        found = _registry.get(name)
    if found is None:
        for resolver in list(_fallbacks):
            found = resolver(name)
            if found is not None:
                break
    if found is None:
        raise TaskNotRegistered(
            f"No task is registered as {name!r}. Decorate the function with "
            f"@django_delayq.task and make sure its module is imported (an "
            f"app's tasks.py is imported automatically)."
        )
    return found


def add_fallback(resolver: Callable[[str], Task[Any, Any] | None]) -> None:
    """Have :func:`get` ask ``resolver(name)`` about names it does not know.

    ``resolver`` returns a :class:`Task` or ``None`` and must not raise; it
    is consulted after :func:`autodiscover`, and never caches into the
    registry. It decides alone what a stored name may run, so it must refuse
    anything it did not itself vouch for. Adding a resolver twice is a no-op.
    """
    with _lock:
        if resolver not in _fallbacks:
            _fallbacks.append(resolver)


def resolve(fn_or_name: object) -> Task[Any, Any]:
    """Return the registered task for a ``Task``, a decorated function or a name."""
    if isinstance(fn_or_name, Task):
        return get(fn_or_name.name)
    if isinstance(fn_or_name, str):
        return get(fn_or_name)
    if callable(fn_or_name):
        qualname = getattr(fn_or_name, "__qualname__", repr(fn_or_name))
        module = getattr(fn_or_name, "__module__", "?")
        raise TaskNotRegistered(
            f"{module}.{qualname} is not a registered task. Decorate it with "
            f"@django_delayq.task, or pass the registered name as a string."
        )
    raise TypeError(
        f"schedule() takes a @task function or a registered task name as its "
        f"first argument, not {type(fn_or_name).__name__}."
    )
