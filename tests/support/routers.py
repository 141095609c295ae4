"""Database routers of the tests: how shops spread their databases."""

from __future__ import annotations

from typing import Any


class ReadReplicaRouter:
    """Reads from ``replica``, writes to ``default``, as a shop with a read
    replica does. The test database ``replica`` has the tables and never
    the rows: a replica that lags, for ever."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True


class TasksOnAnotherDatabase:
    """django-delayq's tables on the database ``alias``, everything else on
    ``default``."""

    alias = ""

    def _ours(self, model: Any) -> bool:
        return bool(model._meta.app_label == "django_delayq")

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self.alias if self._ours(model) else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return self.alias if self._ours(model) else None


class TasksElsewhereRouter(TasksOnAnotherDatabase):
    """On a database of their own (``replica`` plays it)."""

    alias = "replica"


class OutboxApartRouter:
    """The outbox on ``replica``, the task rows on ``default``: a mistake."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "replica" if model.__name__ == "OutboxEntry" else None


class TaskReadsFromReplicaRouter(ReadReplicaRouter):
    """Only django-delayq's reads from ``replica`` (whatever rows a test put
    there: a replica behind); the rest, logins included, on ``default``."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "replica" if model._meta.app_label == "django_delayq" else None
