"""Where an example shop keeps its data, read by a test with the driver
itself: a SQLite file of its own (the example's default), or a database of
its own on the test session's PostgreSQL or MariaDB server
(``SHOP_DATABASE_URL``).

SQL given here is written once for all three: ``?`` placeholders and
identifiers quoted the standard way (``"key"``; MariaDB reads them in
``ANSI_QUOTES`` mode).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.servers import MariaDBServer, PostgresServer

_numbers = itertools.count()


class ShopDatabase:
    def __init__(
        self, directory: Path, server: PostgresServer | MariaDBServer | None = None
    ) -> None:
        self.server = server
        self.file = directory / "shop.sqlite3"
        self.name = f"shop_{os.getpid()}_{next(_numbers)}"
        if isinstance(server, PostgresServer):
            self.vendor = "postgres"
            self.env = {
                "SHOP_DATABASE_URL": f"postgres://{server.user}@{server.host}:"
                f"{server.port}/{self.name}"
            }
        elif isinstance(server, MariaDBServer):
            self.vendor = "mariadb"
            self.env = {
                "SHOP_DATABASE_URL": f"mariadb://{server.user}@{server.host}:"
                f"{server.port}/{self.name}"
            }
        else:
            self.vendor = "sqlite"
            self.env = {"SHOP_DB": str(self.file)}

    def create(self, template: ShopDatabase | None = None) -> bool:
        """Create the empty database, or a copy of ``template`` where that
        is cheap (a SQLite file); False if the copy was not made."""
        if self.vendor == "sqlite":
            if template is not None:
                shutil.copyfile(template.file, self.file)
                return True
            return False
        statements = (
            [f'DROP DATABASE IF EXISTS "{self.name}"', f'CREATE DATABASE "{self.name}"']
            if self.vendor == "postgres"
            else [
                f"DROP DATABASE IF EXISTS `{self.name}`",
                f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4",
            ]
        )
        with contextlib.closing(self._connect(admin=True)) as admin:
            for statement in statements:
                admin.cursor().execute(statement)
        return False

    def drop(self) -> None:
        if self.vendor == "sqlite":
            return
        statement = (
            f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'
            if self.vendor == "postgres"
            else f"DROP DATABASE IF EXISTS `{self.name}`"
        )
        with contextlib.closing(self._connect(admin=True)) as admin:
            admin.cursor().execute(statement)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows ``sql`` returns (or none, for a write, committed)."""
        if self.vendor == "sqlite":
            with contextlib.closing(sqlite3.connect(self.file, timeout=20)) as conn:
                with conn:
                    rows = conn.execute(sql, [_sqlite(p) for p in params]).fetchall()
                return rows
        with contextlib.closing(self._connect()) as conn:
            cursor = conn.cursor()
            naive = self.vendor == "mariadb"
            cursor.execute(
                sql.replace("?", "%s"), [_server(p, naive=naive) for p in params]
            )
            rows = list(cursor.fetchall()) if cursor.description else []
            conn.commit()
            return rows

    def _connect(self, admin: bool = False) -> Any:
        assert self.server is not None
        if self.vendor == "postgres":
            import psycopg

            return psycopg.connect(
                host=self.server.host,
                port=self.server.port,
                user=self.server.user,
                dbname="postgres" if admin else self.name,
                autocommit=admin,
            )
        assert isinstance(self.server, MariaDBServer)
        return self.server.connect(None if admin else self.name, autocommit=admin)


def moment(stored: object) -> datetime.datetime:
    """A datetime column's value as an aware UTC datetime, however the
    driver returns it (SQLite: text; MariaDB: naive UTC)."""
    if isinstance(stored, str):
        stored = datetime.datetime.fromisoformat(stored)
    assert isinstance(stored, datetime.datetime), stored
    if stored.tzinfo is None:
        return stored.replace(tzinfo=datetime.UTC)
    return stored.astimezone(datetime.UTC)


def _sqlite(value: object) -> object:
    """Datetimes as Django writes them to SQLite: naive UTC text."""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(" ")
    return value


def _server(value: object, naive: bool) -> object:
    """Datetimes in UTC, naive for MariaDB (whose DATETIME has no zone, and
    which Django fills with UTC)."""
    if isinstance(value, datetime.datetime):
        value = value.astimezone(datetime.UTC)
        return value.replace(tzinfo=None) if naive else value
    return value
