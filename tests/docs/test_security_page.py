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


def test_the_sentinel_example_passes_the_settings_checks(monkeypatch, tmp_path):
    from django_delayq.conf import find_problems

    [block] = [
        code
        for code in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
        if "REDIS_SENTINEL" in code
    ]
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("PEM")
    monkeypatch.setenv("DELAYQ_SENTINELS", "10.0.0.1:26379,10.0.0.2:26379")
    monkeypatch.setenv("DELAYQ_REDIS_PASSWORD", "app-s3cret")
    monkeypatch.setenv("DELAYQ_SENTINEL_PASSWORD", "sentinel-s3cret")
    monkeypatch.setenv("DELAYQ_REDIS_CA", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("DELAYQ_REDIS_CERT", str(tmp_path / "client.pem"))
    monkeypatch.setenv("DELAYQ_REDIS_KEY", str(tmp_path / "client.key"))
    namespace: dict[str, object] = {}
    exec(compile(block, str(PAGE), "exec"), namespace)
    delayq = namespace["DELAYQ"]
    assert [p.msg for p in find_problems(delayq)] == []
    # Without client certificates too (servers that do not ask for one).
    monkeypatch.delenv("DELAYQ_REDIS_CERT")
    monkeypatch.delenv("DELAYQ_REDIS_KEY")
    exec(compile(block, str(PAGE), "exec"), namespace)
    assert [p.msg for p in find_problems(namespace["DELAYQ"])] == []
