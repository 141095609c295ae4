"""The runs of ``tools/run_tests.sh`` leave no test behind.

SQLite runs the whole suite; PostgreSQL and MariaDB run the tests the
database decides (``VENDOR_TESTS``), and the fault run, the browser run and
each leg's last database run what the others leave out. A list that names a
file which was renamed, or a new database test file that nobody sorted,
would silently narrow what the server databases test. These tests read the
lists from the script, as bash does, and fail first.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "run_tests.sh"
# Run by their own runs, never by the legs' runs.
OWN_RUNS = ("tests/faults/", "tests/upgrade/", "tests/browser/")


def _array(name: str) -> list[str]:
    match = re.search(rf"^{name}=\((.*?)^\)", SCRIPT.read_text(), re.M | re.S)
    assert match, f"{name} not found in {SCRIPT.name}"
    entries = []
    for line in match.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    assert entries, f"{name} is empty"
    return entries


LISTS = (
    "VENDOR_TESTS",
    "VENDOR_INDEPENDENT_TESTS",
    "DJANGO_TESTS",
    "CORE_FAULTS",
    "PROCESS_TESTS",
    "NEW_PROJECT_TESTS",
    "SHOP_PROJECT_TESTS",
)


def _test_files() -> list[str]:
    """Every test file but this one, which names what it looks for."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if path != Path(__file__).resolve()
    )


def _covers(entry: str, test_file: str) -> bool:
    """Whether ``entry`` (a folder, a file or a node id) runs all of
    ``test_file``."""
    if "::" in entry:
        return False
    return test_file == entry or test_file.startswith(entry.rstrip("/") + "/")


def _names_in(test_file: str, entry: str) -> bool:
    return entry.split("::", 1)[0] == test_file


def _uses_the_database(text: str) -> bool:
    return bool(re.search(r"django_db|TransactionTestCase|\bTestCase\b", text))


@pytest.mark.parametrize("name", LISTS)
def test_every_entry_names_a_test_that_exists(name):
    for entry in _array(name):
        path, _, function = entry.partition("::")
        assert (ROOT / path).exists(), f"{name}: {path} does not exist"
        if function:
            tree = ast.parse((ROOT / path).read_text())
            defined = {
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            assert function in defined, f"{name}: {path} defines no {function}"


def test_the_legs_runs_leave_out_only_what_other_runs_take():
    # The whole-suite run ignores the fault, upgrade and browser folders
    # and PROCESS_TESTS: the fault run takes them (and CORE_FAULTS come
    # from its folder).
    for entry in _array("PROCESS_TESTS"):
        assert not entry.startswith(OWN_RUNS), entry
    for entry in _array("CORE_FAULTS"):
        assert entry.startswith("tests/faults/"), entry
    fault_run = r'tests/faults\s*\\?\s*tests/upgrade\s+"\$\{PROCESS_TESTS\[@\]\}"'
    assert re.search(fault_run, SCRIPT.read_text())


def test_every_database_test_file_is_sorted_for_the_server_databases():
    vendor = _array("VENDOR_TESTS")
    independent = _array("VENDOR_INDEPENDENT_TESTS")
    elsewhere = (
        _array("PROCESS_TESTS")
        + _array("NEW_PROJECT_TESTS")
        + _array("SHOP_PROJECT_TESTS")
    )
    unsorted = []
    for test_file in _test_files():
        if test_file.startswith(OWN_RUNS) or test_file in elsewhere:
            continue
        if not _uses_the_database((ROOT / test_file).read_text()):
            continue
        sorted_in = [
            entry
            for entry in vendor + independent
            if _covers(entry, test_file) or _names_in(test_file, entry)
        ]
        if not sorted_in:
            unsorted.append(test_file)
    assert not unsorted, (
        "database test files in neither VENDOR_TESTS nor "
        f"VENDOR_INDEPENDENT_TESTS of tools/run_tests.sh: {unsorted}"
    )


def test_no_file_is_both_vendor_and_independent():
    vendor = [entry for entry in _array("VENDOR_TESTS") if "::" not in entry]
    for entry in _array("VENDOR_INDEPENDENT_TESTS"):
        assert not any(_covers(folder, entry) for folder in vendor), entry


def test_tests_that_branch_on_the_database_run_on_every_database():
    vendor = _array("VENDOR_TESTS")
    for test_file in _test_files():
        if test_file.startswith(OWN_RUNS):
            continue
        text = (ROOT / test_file).read_text()
        if "TEST_DB" in text or ".vendor" in text:
            assert any(_covers(entry, test_file) for entry in vendor), (
                f"{test_file} depends on the database: add it to VENDOR_TESTS"
            )
