"""Django's own Tasks test suite (``tests/tasks``), run against
``django_delayq.backends.DelayQueueBackend``.

    python -m tools.django_tasks_suite [--db sqlite|postgres|mariadb] [-v 2]

The tests come from the source distribution of the Django release installed
in the running interpreter, downloaded from PyPI once (``pip download``) and
kept in ``.venv/django-sdist/``; only ``tests/tasks`` is extracted, to a
temporary directory, as the package ``tasks`` that the suite expects. A
private redis-server (and PostgreSQL or MariaDB with ``--db``) is started by
:mod:`tools.servers`, and the suite runs under Django's test runner.

The glue, and nothing else, adapts the suite to a third-party backend:

- Every backend the tests configure with ``override_settings(TASKS=...)`` is
  swapped for one of ours (:mod:`tools.django_tasks_glue`) as the setting
  changes: Django's ``DummyBackend`` (which stores results and runs
  nothing) for ``StoringDelayQueueBackend``, a ``DelayQueueBackend`` with
  the dummy's ``results`` and ``clear()`` (the rows, read back; deleted),
  and its ``ImmediateBackend`` (which runs a task in ``enqueue()``) for
  ``RunningDelayQueueBackend``, a ``DelayQueueBackend`` that after writing
  the task's row runs the real ``delayq_dispatch --once`` and
  ``delayq_worker --once`` and reads the row back, so the result is the
  one a worker produced. Django's backends make one attempt; so does that
  alias (``max_attempts`` 1).
- The queue names the tests use are declared in ``DELAYQ["QUEUES"]``.
- The suite's ``SimpleTestCase`` classes may use the database, which our
  backend writes to, and its ``TransactionTestCase`` classes keep every
  app available (``available_apps = []`` would hide the app of the test
  tasks, which this backend then refuses to enqueue).

The tests that are about Django's own backends, not about the framework's
contract with any backend, are left out: :data:`EXCLUDED` names each with
the reason. A left-out test that no longer exists, or a run of no tests at
all, is an error, so the list cannot go stale silently.

Django 5.2 has no ``django.tasks``; the django-tasks backport's source
distribution ships no tests, so on that leg there is nothing to run and the
command says so (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tarfile
import tempfile
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django

ROOT = Path(__file__).resolve().parents[1]
SDIST_CACHE = ROOT / ".venv" / "django-sdist"

_DUMMY = "Django's DummyBackend: "
_IMMEDIATE = "Django's ImmediateBackend: "
_DUMMY_REFRESH = (
    _DUMMY + "the test changes the status of the result it keeps in memory "
    "and expects refresh() to read that; this backend reads the row, which "
    "only a worker changes (refresh() after a real run is tested through "
    "ImmediateBackend's tests)"
)
_OTHER_ALIAS = (
    "enqueues a task declared for one alias through another, with "
    "using(backend=...), which this backend refuses: a worker finds the task "
    "by importing it, and runs it with the options of the alias it declares"
)

#: Tests of ``tests/tasks`` not run, with why. Ids are ``module.Class.test``.
EXCLUDED: dict[str, str] = {
    # A backend of the test's own, not ours: nothing to swap in.
    "test_custom_backend": "tests custom backend classes defined in the module",
    "test_dummy_backend.DummyBackendTestCase.test_using_correct_backend": (
        _DUMMY + "isinstance and empty OPTIONS"
    ),
    "test_dummy_backend.DummyBackendTestCase.test_refresh_result": _DUMMY_REFRESH,
    "test_dummy_backend.DummyBackendTestCase.test_refresh_result_async": (
        _DUMMY_REFRESH
    ),
    "test_tasks.TaskTestCase.test_using_correct_backend": _DUMMY + "isinstance",
    "test_tasks.TaskTestCase.test_get_backend": _DUMMY + "isinstance",
    # Documented limits of this backend (docs/guide/django-tasks.md, "What
    # is not supported"): it refuses these with InvalidTask, as it should.
    "test_tasks.TaskTestCase.test_task_error_invalid_exception": _OTHER_ALIAS,
    "test_tasks.TaskTestCase.test_task_error_unknown_module": _OTHER_ALIAS,
    # Results live in the database here, not in memory.
    "test_tasks.TaskTestCase.test_refresh_result": (
        "calls the synchronous refresh() from async code: for a backend that "
        "reads results from the database, Django refuses that query "
        "(SynchronousOnlyOperation), as it should; arefresh() is tested"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_using_correct_backend": (
        _IMMEDIATE + "isinstance and empty OPTIONS"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_get_result": (
        _IMMEDIATE + "it cannot read results back; this backend can"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_refresh_result": (
        _IMMEDIATE + "it cannot read results back; this backend can"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_pass_run_after": (
        _IMMEDIATE + "it refuses run_after; this backend defers tasks"
    ),
    "test_immediate_backend.ImmediateBackendTestCase.test_throws_keyboard_interrupt": (
        _IMMEDIATE + "a task runs in the caller's thread, so KeyboardInterrupt "
        "reaches the caller; a worker records it as the task's failure"
    ),
    "test_immediate_backend.ImmediateBackendTransactionTestCase"
    ".test_doesnt_wait_until_transaction_commit_by_default": (
        _IMMEDIATE + "runs the task inside the caller's transaction; this "
        "backend's worker runs it after the commit, by design"
    ),
}


def _say(message: str) -> None:
    print(f"django_tasks_suite: {message}", file=sys.stderr, flush=True)


# -- getting the tests -----------------------------------------------------------


def sdist(version: str) -> Path:
    """The cached sdist of Django ``version``, downloaded from PyPI if missing."""
    SDIST_CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(SDIST_CACHE.glob(f"[dD]jango-{version}.tar.gz"))
    if found:
        return found[0]
    _say(f"downloading the Django {version} source distribution from PyPI")
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", "--disable-pip-version-check",
             f"django=={version}", "--dest", str(SDIST_CACHE)],
            check=True,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise SystemExit(
            f"django_tasks_suite: pip could not download Django {version} "
            f"(exit {exc.returncode}); without network, put "
            f"django-{version}.tar.gz from PyPI in {SDIST_CACHE}"
        ) from None
    found = sorted(SDIST_CACHE.glob(f"[dD]jango-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"no Django {version} sdist in {SDIST_CACHE} after pip")
    return found[0]


def extract_tests(archive: Path, into: Path) -> Path:
    """Extract ``tests/tasks`` of ``archive`` as ``into/tasks``."""
    with tarfile.open(archive) as tar:
        members = [
            member
            for member in tar.getmembers()
            if member.isfile() and member.name.split("/")[1:3] == ["tests", "tasks"]
        ]
        if not members:
            raise SystemExit(f"{archive.name} has no tests/tasks")
        for member in members:
            member.name = "/".join(member.name.split("/")[2:])
            tar.extract(member, into, filter="data")
    return into / "tasks"


# -- settings and glue -----------------------------------------------------------


def settings(
    redis_url: str, database: dict[str, Any], verbosity: int
) -> dict[str, Any]:
    # Every queue name the tests use, as a django-delayq queue.
    queues = ["queue_1", "queue-1", "queue-2", "unknown_queue", "high"]
    return {
        "SECRET_KEY": "django-tasks-suite",
        "USE_TZ": True,
        "DEFAULT_AUTO_FIELD": "django.db.models.BigAutoField",
        "INSTALLED_APPS": [
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_delayq",
            "tasks",
        ],
        "DATABASES": {"default": database},
        "DELAYQ": {"REDIS_URL": redis_url, "QUEUES": {name: {} for name in queues}},
        "TASKS": {"default": {"BACKEND": "django_delayq.backends.DelayQueueBackend"}},
        # The worker logs every failure of the suite's failing tasks, with
        # its traceback; shown with -v 2 only. (The tests assert on the
        # framework's own "django.tasks" records, which are kept.)
        "LOGGING": {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"null": {"class": "logging.NullHandler"}},
            "loggers": {
                "django_delayq": {
                    "handlers": [] if verbosity > 1 else ["null"],
                    "propagate": verbosity > 1,
                }
            },
        },
    }


#: Django's backends, and what the glue runs instead.
SWAPS = {
    "django.tasks.backends.dummy.DummyBackend": (
        "tools.django_tasks_glue.StoringDelayQueueBackend"
    ),
    "django.tasks.backends.immediate.ImmediateBackend": (
        "tools.django_tasks_glue.RunningDelayQueueBackend"
    ),
}


def swap_backends(setting: str, value: Any, **kwargs: Any) -> None:
    """``setting_changed`` receiver: our backends for Django's, in place."""
    if setting != "TASKS" or not isinstance(value, dict):
        return
    for params in value.values():
        backend = params.get("BACKEND")
        if backend in SWAPS:
            params["BACKEND"] = SWAPS[backend]
            if "immediate" in backend:
                params.setdefault("OPTIONS", {}).setdefault("max_attempts", 1)


# -- running ---------------------------------------------------------------------


def _tests(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _tests(test)
        else:
            yield test


def _excluded(test_id: str) -> str | None:
    """The entry of :data:`EXCLUDED` that leaves ``test_id`` out, if any."""
    short = test_id.removeprefix("tasks.")
    for prefix in EXCLUDED:
        if short == prefix or short.startswith(prefix + "."):
            return prefix
    return None


def run(verbosity: int, database: dict[str, Any], redis_url: str) -> int:
    from django.conf import settings as django_settings

    django_settings.configure(**settings(redis_url, database, verbosity))
    django.setup()
    from django.test import SimpleTestCase, TransactionTestCase
    from django.test.runner import DiscoverRunner
    from django.test.signals import setting_changed

    setting_changed.connect(swap_backends)
    unused = set(EXCLUDED)
    kept = unittest.TestSuite()

    class Runner(DiscoverRunner):
        def build_suite(self, *args: Any, **kwargs: Any) -> unittest.TestSuite:
            for test in _tests(super().build_suite(*args, **kwargs)):
                prefix = _excluded(test.id())
                if prefix is not None:
                    unused.discard(prefix)
                    continue
                if isinstance(test, TransactionTestCase):
                    # available_apps = [] hides the test's own app, whose
                    # tasks this backend then refuses (a worker could not
                    # import them): all apps stay available.
                    type(test).available_apps = None
                elif isinstance(test, SimpleTestCase):
                    # Our backend writes rows; Django's kept results in memory.
                    type(test).databases = {"default"}
                kept.addTest(test)
            if unused:
                raise SystemExit(
                    "django_tasks_suite: left-out tests that do not exist: "
                    + ", ".join(sorted(unused))
                )
            if not kept.countTestCases():
                raise SystemExit("django_tasks_suite: no tests collected")
            _say(f"running {kept.countTestCases()} tests, leaving out {len(EXCLUDED)}")
            return kept

    failures = Runner(verbosity=verbosity, interactive=False).run_tests(["tasks"])
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.django_tasks_suite")
    parser.add_argument(
        "--db", choices=["sqlite", "postgres", "mariadb"], default="sqlite"
    )
    parser.add_argument("-v", "--verbosity", type=int, default=1)
    args = parser.parse_args(argv)
    if django.VERSION < (6, 0):
        _say(
            f"Django {django.get_version()} has no django.tasks, and the "
            "django-tasks backport's sdist ships no tests: nothing to run"
        )
        return 2
    from tools.servers import MariaDBServer, PostgresServer, RedisServer

    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        extract_tests(sdist(django.get_version()), workdir)
        sys.path.insert(0, str(workdir))
        redis = stack.enter_context(RedisServer())
        database: dict[str, Any]
        if args.db == "postgres":
            pg = stack.enter_context(PostgresServer())
            database = pg.django_settings()
        elif args.db == "mariadb":
            mariadb = stack.enter_context(MariaDBServer())
            database = mariadb.django_settings()
        else:
            database = {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(workdir / "db.sqlite3"),
                "TEST": {"NAME": str(workdir / "test.sqlite3")},
            }
        return run(args.verbosity, database, redis.url)
    return 1


if __name__ == "__main__":
    sys.exit(main())
