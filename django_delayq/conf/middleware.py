"""``DELAYQ["MIDDLEWARE"]``, built: the classes the setting names, each
built once per process, chained as Django chains its middleware.

A middleware is a class built with the next step of the chain (the first
entry of the setting is the outermost; the innermost step calls the task's
function) and called with each run of a task
(:class:`~django_delayq.worker.attempts.TaskRun`). One that also defines
``on_schedule(self, task, meta)`` is asked, in the setting's order, for the
metadata of every task a process schedules (:class:`ScheduleHook`).

The worker takes the chain from here for each run
(:mod:`django_delayq.worker.attempts`), ``schedule()`` the hooks
(:mod:`django_delayq.api`): a process builds each middleware once, whichever
it does. Building imports the project's classes, so it happens on first use,
never while the settings are read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.utils.module_loading import import_string

from ..exceptions import InvalidConfiguration
from .settings import get_settings

#: A step of the chain: a run in, the function's value out.
Handler = Callable[[Any], Any]


class ScheduleHook(Protocol):
    """A middleware's ``on_schedule``: given the registered task being
    scheduled and its metadata so far (a dict of its own, which it may
    change), return the metadata the task is scheduled with."""

    def __call__(self, task: Any, meta: dict[str, Any], /) -> Mapping[str, Any]: ...


def innermost(run: Any) -> Any:
    """The end of the chain: call the task's function as ``run`` says."""
    return run._call()


@dataclass(frozen=True)
class Middleware:
    """The middleware of a ``MIDDLEWARE`` setting, built."""

    #: the setting's dotted paths
    paths: tuple[str, ...]
    #: the outermost step of the chain (:func:`innermost` without middleware)
    handler: Handler
    #: ``(path, on_schedule)`` of each middleware that defines one, in the
    #: setting's order
    schedule_hooks: tuple[tuple[str, ScheduleHook], ...]


def load(paths: Sequence[str]) -> Middleware:
    """Build the middleware at ``paths``, outermost first; raise
    :class:`~django_delayq.exceptions.InvalidConfiguration` naming an entry
    that cannot be imported or built."""
    handler: Handler = innermost
    hooks: list[tuple[str, ScheduleHook]] = []
    for path in reversed(paths):
        where = f'DELAYQ["MIDDLEWARE"] entry {path!r}'
        try:
            factory = import_string(path)
        except ImportError as exc:
            raise InvalidConfiguration(
                f"{where} cannot be imported ({exc}); give the dotted path of "
                f"a middleware class, such as 'shop.tasks.TenantMiddleware'."
            ) from None
        try:
            handler = factory(handler)
        except Exception as exc:
            raise InvalidConfiguration(
                f"{where} could not be built with the next step of the chain "
                f"({type(exc).__name__}: {exc}); its __init__ takes one argument, "
                f"as a Django middleware's does."
            ) from None
        if not callable(handler):
            raise InvalidConfiguration(
                f"{where} built an object that cannot be called; give it a "
                f"__call__(self, run) method."
            )
        hook = getattr(handler, "on_schedule", None)
        if hook is not None:
            if not callable(hook):
                raise InvalidConfiguration(
                    f"{where} has an on_schedule attribute that cannot be "
                    f"called; make it a method on_schedule(self, task, meta)."
                )
            hooks.append((path, hook))
    return Middleware(tuple(paths), handler, tuple(reversed(hooks)))


_lock = threading.Lock()
_built = Middleware((), innermost, ())


def get_middleware() -> Middleware:
    """This process's middleware, built again when the setting changes."""
    global _built
    paths = get_settings().middleware
    built = _built
    if built.paths != paths:
        with _lock:
            if _built.paths != paths:
                _built = load(paths)
            built = _built
    return built
