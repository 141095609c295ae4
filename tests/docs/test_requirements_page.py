"""docs/requirements.md gives the floors pyproject.toml sets: a floor raised
for a security fix is raised on the page users read, and the reverse."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "requirements.md"


def floors() -> dict[str, str]:
    """Each dependency of the package -> its lowest allowed version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        (lowest,) = [s.version for s in requirement.specifier if s.operator == ">="]
        found[requirement.name.lower()] = lowest
    return found


def row(label: str) -> str:
    """The "Supported" cell of the page's table row ``label``."""
    match = re.search(
        rf"^\| {re.escape(label)} \| (?P<cell>[^|]+) \|", PAGE.read_text(), re.M
    )
    assert match is not None, f"no {label!r} row in {PAGE.name}"
    return match["cell"]


def test_the_django_row_gives_pyprojects_floor():
    assert row("Django").startswith(f"{floors()['django']} or newer ")


def test_the_packages_row_gives_each_other_dependencys_floor():
    given = dict(re.findall(r"`([\w-]+)` ([\d.]+)\+", row("Python packages")))
    expected = {name: lowest for name, lowest in floors().items() if name != "django"}
    assert given == expected
