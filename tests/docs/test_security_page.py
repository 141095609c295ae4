"""docs/security.md lists every permission the admin checks, and only
permissions that exist."""

from __future__ import annotations

import re
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "security.md"
ADMIN = ROOT / "django_delayq" / "admin"


def _documented() -> set[str]:
    return set(re.findall(r"^\s*\| `(\w+)` \|", PAGE.read_text(), re.M))


def _existing() -> set[str]:
    """The codenames of the app's permissions: Django's defaults and each
    model's own."""
    found = set()
    for model in apps.get_app_config("django_delayq").get_models():
        opts = model._meta
        found |= {f"{verb}_{opts.model_name}" for verb in opts.default_permissions}
        found |= {codename for codename, _name in opts.permissions}
    return found


def _checked_by_the_admin() -> set[str]:
    """What the admin's code checks: each model's own permissions (its
    actions), the permissions it names in full, the view permissions of the
    read-only pages and Django's four of the admin that edits."""
    text = "\n".join(path.read_text() for path in ADMIN.glob("*.py"))
    named = set(re.findall(r"django_delayq\.(\w+)", text))
    own = set()
    for model in apps.get_app_config("django_delayq").get_models():
        own |= {codename for codename, _name in model._meta.permissions}
    views = {"view_delayedtask", "view_outboxentry", "view_periodicschedule"}
    runtime = {
        f"{verb}_runtimeschedule" for verb in ("view", "add", "change", "delete")
    }
    return (named & _existing()) | own | views | runtime


def test_every_permission_the_admin_checks_is_documented():
    assert _checked_by_the_admin() - _documented() == set()


def test_every_documented_permission_exists():
    assert _documented() - _existing() == set()
