"""Create the demo superuser of the example, once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Create a superuser for the demo (default admin / admin) unless a user "
        "of that name exists; an existing user keeps its password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = options["username"], options["password"]
        if not username or not password:
            raise CommandError("--username and --password must not be empty.")
        users = get_user_model()._default_manager
        if users.filter(username=username).exists():
            self.stdout.write(f"Demo superuser {username!r} already exists.")
            return
        users.create_superuser(username=username, email="", password=password)
        self.stdout.write(f"Created the demo superuser {username!r}.")
