"""System checks (``manage.py check``), ids ``delayq.E001``... and ``delayq.W001``.

See docs/reference/checks.md for the meaning of each id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning

from .. import conf, registry
from ..conf import check_ids
from ..conf.middleware import load
from ..exceptions import (
    InvalidConfiguration,
    InvalidTaskDefinition,
    KeyPrefixInUse,
    RedisUnavailable,
)

logger = logging.getLogger(__name__)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """Report everything wrong with ``settings.DELAYQ``."""
    messages: list[CheckMessage] = []
    for problem in conf.find_problems(conf.raw_settings()):
        kind = Error if problem.error else Warning
        messages.append(kind(problem.msg, hint=problem.hint, id=problem.id))
    return messages


def check_databases(**kwargs: Any) -> list[CheckMessage]:
    """Report a database router that sends django-delayq's models to
    different databases (``delayq.E018``): an outbox entry commits with its
    task, a periodic schedule's compare-and-set with its ticks."""
    from django.db import router

    from ..models import OutboxEntry, PeriodicSchedule, write_db

    tasks = write_db()
    return [
        Error(
            f"The database router sends {model.__name__} rows to {other!r} "
            f"and DelayedTask rows to {tasks!r}: django-delayq's rows commit "
            f"together, so they must share one database.",
            hint="Route every model of the django_delayq app to one database "
            "(db_for_write, and allow_migrate for its migrations).",
            obj=model,
            id=check_ids.DATABASES_APART,
        )
        for model in (OutboxEntry, PeriodicSchedule)
        if (other := router.db_for_write(model)) != tasks
    ]


#: The databases every guarantee is tested on (docs/requirements.md).
SUPPORTED_VENDORS = ("postgresql", "sqlite")
#: MariaDB from 10.6, the first with SKIP LOCKED and the oldest still
#: maintained; the suite runs on Debian's 10.11.
MARIADB_MINIMUM = (10, 6)


def check_database_vendor(**kwargs: Any) -> list[CheckMessage]:
    """Refuse a database the guarantees are not tested on (``delayq.E019``):
    anything but PostgreSQL, SQLite and MySQL or MariaDB (which
    :func:`check_database_server` tells apart); and a MySQL or MariaDB
    connection that cannot carry every character (``delayq.E020``)."""
    from django.db import connections

    from ..models import write_db

    alias = write_db()
    connection = connections[alias]
    if connection.vendor in SUPPORTED_VENDORS:
        return []
    if connection.vendor == "mysql":
        return _check_charset(alias, connection)
    return [_untested(alias, connection.display_name)]


def check_database_server(
    databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """What only the server can say: MySQL or MariaDB, which version
    (``delayq.E019``: MySQL itself is not tested, its locking and generated
    columns differ from MariaDB's in ways that matter here), and the task
    table's character set (``delayq.E020``). A database check: run, as
    Django's own are, only for the databases a command names (``migrate``,
    the test runner, ``check --database``)."""
    from django.db import DatabaseError, connections

    from ..models import write_db

    alias = write_db()
    connection: Any = connections[alias]  # MySQL's wrapper has the version
    if connection.vendor != "mysql" or not databases or alias not in databases:
        return []
    try:
        mariadb = connection.mysql_is_mariadb
        version = connection.mysql_version
    except DatabaseError:
        return []  # no server to ask: the other checks say so
    if mariadb and version >= MARIADB_MINIMUM:
        return _check_table_charset(alias, connection)
    product = "MariaDB" if mariadb else "MySQL"
    return [_untested(alias, f"{product} {'.'.join(map(str, version))}")]


def _untested(alias: str, found: str) -> Error:
    return Error(
        f"The task rows' database {alias!r} is {found}, on which django-delayq "
        f"is not tested: its guarantees (a dedupe key held by one active "
        f"task, nothing lost under faults) are tested on PostgreSQL, SQLite "
        f"and MariaDB {'.'.join(map(str, MARIADB_MINIMUM))} or later.",
        hint="Route django-delayq's models to one of those with a database "
        "router (see docs/requirements.md), or, having tested it yourself, "
        f"add {check_ids.DATABASE_UNSUPPORTED!r} to SILENCED_SYSTEM_CHECKS.",
        id=check_ids.DATABASE_UNSUPPORTED,
    )


def _check_charset(alias: str, connection: Any) -> list[CheckMessage]:
    """``delayq.E020``: on MySQL and MariaDB, Django connects in ``utf8``
    (3 bytes a character at most) unless told otherwise, and a task whose
    arguments or error hold an emoji could then not be written, or its
    failure not recorded."""
    charset = str(connection.settings_dict.get("OPTIONS", {}).get("charset", "utf8"))
    if charset.startswith("utf8mb4"):
        return []
    return [
        Error(
            f"The task rows' database {alias!r} is connected in {charset!r}, "
            f"which cannot carry 4-byte characters (emoji, some CJK): a task "
            f"whose arguments or error hold one could not be written.",
            hint=f"Set DATABASES[{alias!r}]['OPTIONS']['charset'] = 'utf8mb4' "
            "(and create the database with CHARACTER SET utf8mb4).",
            id=check_ids.DATABASE_CHARSET,
        )
    ]


def _check_table_charset(alias: str, connection: Any) -> list[CheckMessage]:
    """``delayq.E020`` for the tables: a database created in another
    character set (``latin1`` is MariaDB's own default) gives the tables
    that set, whatever the connection's."""
    from django.db import DatabaseError

    from ..models import DelayedTask

    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME, CHARACTER_SET_NAME "
                "FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
                "AND CHARACTER_SET_NAME IS NOT NULL "
                "AND CHARACTER_SET_NAME <> 'utf8mb4' ORDER BY ORDINAL_POSITION",
                [DelayedTask._meta.db_table],
            )
            narrow = cursor.fetchall()
    except DatabaseError:
        return []  # no server to ask, or not migrated: nothing to check yet
    if not narrow:
        return []
    columns = ", ".join(f"{name} ({charset})" for name, charset in narrow)
    table = DelayedTask._meta.db_table
    return [
        Error(
            f"The task table on {alias!r} has columns that cannot hold 4-byte "
            f"characters (emoji, some CJK): {columns}. A task whose arguments or "
            f"error hold one could not be written.",
            hint=f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4; and "
            "make utf8mb4 the database's default (ALTER DATABASE ... CHARACTER "
            "SET utf8mb4).",
            id=check_ids.DATABASE_CHARSET,
        )
    ]


def check_tasks(**kwargs: Any) -> list[CheckMessage]:
    """Report registered tasks whose queue is not configured (``delayq.E008``)."""
    try:
        settings = conf.parse(conf.raw_settings())
    except InvalidConfiguration:
        return []  # check_settings reports it
    registry.autodiscover()
    return [
        Error(
            f"Task {name!r} uses queue {task.queue!r}, which is not configured.",
            hint=f'Add {task.queue!r} to settings.DELAYQ["QUEUES"], or change '
            f"the task's queue.",
            obj=name,
            id=check_ids.TASK_QUEUE,
        )
        for name, task in sorted(registry.all_tasks().items())
        if task.queue is not None and task.queue not in settings.queues
    ]


def check_periodic(**kwargs: Any) -> list[CheckMessage]:
    """Report ``DELAYQ["PERIODIC"]`` entries that cannot run
    (``delayq.E015``); the planners leave them out and log the same."""
    from ..recurring import declared

    try:
        _, problems = declared()
    except InvalidTaskDefinition as exc:  # PERIODIC itself is not a dict
        problems = [str(exc)]
    return [
        Error(
            problem,
            hint="Fix the entry (see the periodic schedules guide), or remove it.",
            id=check_ids.PERIODIC,
        )
        for problem in problems
    ]


def check_middleware(**kwargs: Any) -> list[CheckMessage]:
    """Report ``DELAYQ["MIDDLEWARE"]`` entries that cannot be imported or
    built (``delayq.E021``): every run, and every ``schedule()``, would
    fail."""
    try:
        settings = conf.parse(conf.raw_settings())
    except InvalidConfiguration:
        return []  # check_settings reports it
    try:
        load(settings.middleware)
    except InvalidConfiguration as exc:
        return [
            Error(
                str(exc),
                hint="Fix the path, or remove the entry (see the execution guide).",
                id=check_ids.MIDDLEWARE,
            )
        ]
    return []


def check_celery_eager(**kwargs: Any) -> list[CheckMessage]:
    """Warn that Celery's eager mode does not run django-delayq's tasks
    (``delayq.W008``): a project moving over keeps its test settings."""
    eager = [
        name
        for name in ("CELERY_TASK_ALWAYS_EAGER", "CELERY_ALWAYS_EAGER")
        if getattr(django_settings, name, False)
    ]
    if not eager:
        return []
    return [
        Warning(
            f"settings.{eager[0]} is set: it makes Celery run its own tasks "
            f"at once, not django-delayq's (a @shared_task of "
            f"django_delayq.contrib.celery included).",
            hint='In tests, set DELAYQ["TEST_MODE"] = "immediate" (each task '
            'runs when its transaction commits) or "manual" (run_due()).',
            id=check_ids.CELERY_EAGER,
        )
    ]


def check_key_prefix_owner(
    databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Claim ``KEY_PREFIX`` for this project, or report that another holds
    it (``delayq.E014``); a database check, so it runs only when asked to
    touch the databases."""
    from .. import ownership

    if not databases:
        return []
    try:
        if conf.parse(conf.raw_settings()).test_mode is not None:
            # Tests in TEST_MODE never touch Redis, and the test runner runs
            # this check too: it must not need a Redis server either.
            return []
        ownership.check_prefix()
    except KeyPrefixInUse as exc:
        return [
            Error(
                str(exc).removesuffix(f" ({check_ids.KEY_PREFIX_IN_USE})"),
                hint="Set a KEY_PREFIX of this project's own in settings.DELAYQ.",
                id=check_ids.KEY_PREFIX_IN_USE,
            )
        ]
    except (InvalidConfiguration, RedisUnavailable):
        return []  # check_settings reports the one; the loops wait out the other
    except Exception:
        # The database cannot be read here (Django 6.1 runs database checks
        # for `check --tag django_delayq` too, wherever it is run): the loops
        # check the prefix themselves when they start.
        logger.debug("delayq.E014 not checked", exc_info=True)
    return []


def check_tasks_framework(**kwargs: Any) -> list[CheckMessage]:
    """Report ``TASKS`` aliases on DelayQueueBackend without the framework
    (``delayq.E011``); the backend checks itself otherwise (E009, E010)."""
    from ..contrib.tasks import compat as tasks_compat

    tasks = getattr(django_settings, "TASKS", None)
    if tasks_compat.AVAILABLE or not isinstance(tasks, Mapping):
        return []
    return [
        Error(
            f'TASKS["{alias}"] uses DelayQueueBackend, but Django\'s Tasks '
            f"framework is not installed, so nothing reads settings.TASKS.",
            hint="Upgrade to Django 6.0 or later, or install the django-tasks "
            'backport: pip install "django-delayq[tasks]".',
            obj=alias,
            id=check_ids.NO_TASKS_FRAMEWORK,
        )
        for alias, params in tasks.items()
        if isinstance(params, Mapping)
        and params.get("BACKEND") == "django_delayq.backends.DelayQueueBackend"
    ]
