"""A database backend that says it is MySQL: SQLite underneath, so that the
system check refusing an unsupported database can be run without a MySQL
driver. Only the check looks at it; nothing connects through it."""

from __future__ import annotations

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper


class DatabaseWrapper(SQLiteWrapper):
    vendor = "mysql"
    display_name = "MySQL"
