"""A database backend that says it is MySQL: SQLite underneath, so that the
system check refusing an untested MySQL server can be run without one. The
server it claims to be is ``DELAYQ_FAKE_MYSQL`` ("MySQL 8.0.36" unless set,
or e.g. "MariaDB 10.5.0"). Only the check looks at it; nothing connects
through it."""

from __future__ import annotations

import os

from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper

_product, _version = os.environ.get("DELAYQ_FAKE_MYSQL", "MySQL 8.0.36").split()


class DatabaseWrapper(SQLiteWrapper):
    vendor = "mysql"
    display_name = _product
    mysql_is_mariadb = _product == "MariaDB"
    mysql_version = tuple(int(part) for part in _version.split("."))
