"""``manage.py delayq_queue``: pause and resume queues, list the paused ones
(:mod:`django_delayq.queues`)."""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_delayq.conf import get_settings
from django_delayq.queues import pause_queue, paused_queues, resume_queue


class Command(BaseCommand):
    help = (
        "Pause or resume queues, or list the paused ones. No worker starts a "
        "task of a paused queue (those running finish); its tasks fall due "
        "as usual and wait, and run in due order once it is resumed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action",
            choices=("pause", "resume", "list"),
            help="pause or resume the queues named, or list the paused ones.",
        )
        parser.add_argument(
            "names", nargs="*", metavar="NAME", help="A queue (pause, resume)."
        )
        parser.add_argument(
            "--reason",
            default=None,
            help="pause: why, kept with the pause (200 characters).",
        )
        parser.add_argument(
            "--by",
            default=None,
            help="pause: who pauses, kept with the pause (default: the OS user).",
        )
        parser.add_argument(
            "--json", action="store_true", help="list: print a JSON list."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        names: list[str] = list(dict.fromkeys(options["names"]))
        if action != "pause" and (options["reason"], options["by"]) != (None, None):
            raise CommandError("--reason and --by go with pause only.")
        if action != "list" and options["json"]:
            raise CommandError("--json goes with list only.")
        if action == "list":
            if names:
                raise CommandError("list takes no queue name.")
            return self._list(options["json"])
        if not names:
            raise CommandError(f"{action} needs at least one queue name.")
        self._check_names(names, action)
        for name in names:
            if action == "pause":
                by = options["by"]
                done = pause_queue(
                    name,
                    by=_os_user() if by is None else by,
                    reason=options["reason"] or "",
                )
                self.stdout.write(
                    f"queue {name} paused"
                    if done
                    else f"queue {name} was paused already (nothing changed)"
                )
            else:
                done = resume_queue(name)
                self.stdout.write(
                    f"queue {name} resumed"
                    if done
                    else f"queue {name} was not paused (nothing changed)"
                )

    def _check_names(self, names: list[str], action: str) -> None:
        """Refuse unknown names before changing anything (a paused queue no
        longer configured may still be resumed)."""
        configured = sorted(get_settings().queues)
        known = set(configured)
        if action == "resume":
            known |= {row.name for row in paused_queues()}
        if unknown := [name for name in names if name not in known]:
            raise CommandError(
                f"unknown queue(s): {', '.join(unknown)}; the configured "
                f"queues are: {', '.join(configured)} (DELAYQ['QUEUES'] and "
                f"'default')."
            )

    def _list(self, as_json: bool) -> None:
        rows = paused_queues()
        if as_json:
            self.stdout.write(
                json.dumps(
                    [
                        {
                            "queue": row.name,
                            "paused_at": row.paused_at.isoformat(),
                            "paused_by": row.paused_by,
                            "reason": row.reason,
                        }
                        for row in rows
                    ]
                )
            )
            return
        if not rows:
            self.stdout.write("no queue is paused")
            return
        for row in rows:
            at = timezone.localtime(row.paused_at).isoformat(timespec="seconds")
            by = f" by {row.paused_by}" if row.paused_by else ""
            why = f": {row.reason}" if row.reason else ""
            self.stdout.write(f"{row.name}  paused {at}{by}{why}")


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
