"""The package's structure: no import cycles, modules short enough to read,
one definition of the options, the check ids in one place.

The import graph is read from the source (every ``import``, also inside
functions, which hides a cycle but does not remove it), so a cycle fails
here before it makes a refactor painful. The one kind of cycle accepted is
Django's own habit (``Task.get_backend()`` imports its backends): a method
importing, inside itself, a module that imports its module. Each is listed
in :data:`LAZY_CYCLES` with why, and must stay inside its function.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from django_delayq import (
    acancel,
    areschedule,
    aretry,
    aschedule,
    aschedule_many,
    cancel,
    reschedule,
    retry,
    schedule,
    schedule_many,
)
from django_delayq.options import ScheduleOptions
from django_delayq.registry import Task

PACKAGE = Path(__file__).resolve().parents[2] / "django_delayq"
DOCS_CHECKS = PACKAGE.parent / "docs" / "reference" / "checks.md"
CONTRIBUTING = PACKAGE.parent / "docs" / "contributing.md"


#: (module, imported module) -> why the import, made inside a function of
#: the module, may close a cycle.
LAZY_CYCLES = {
    ("django_delayq.registry", "django_delayq.api"): (
        "Task.schedule() calls schedule(), whose module imports the registry"
    ),
    ("django_delayq.registry", "django_delayq.asyncapi"): (
        "Task.aschedule() calls aschedule(), whose module imports the API"
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges() -> dict[str, dict[str, bool]]:
    """Each module of the package -> the modules of the package it imports,
    each with whether only imports inside functions name it."""
    modules = {
        module_name(path): path
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    }
    edges: dict[str, dict[str, bool]] = {name: {} for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        in_functions = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0]
                    base = f"{anchor}.{base}" if base else anchor
                # "from . import x" imports the module x when there is one.
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    lazy = id(node) in in_functions
                    edges[name][target] = edges[name].get(target, True) and lazy
                    break
    return edges


def import_graph(*, accepted: Iterable[tuple[str, str]] = ()) -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package it imports;
    without the ``accepted`` edges where only functions import."""
    skip = set(accepted)
    return {
        name: {
            target
            for target, lazy in targets.items()
            if not (lazy and (name, target) in skip)
        }
        for name, targets in import_edges().items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # The backend imports api inside enqueue(): an edge all the same.
    assert "django_delayq.api" in graph["django_delayq.contrib.tasks.backend"]
    assert "django_delayq.models" in graph["django_delayq.api"]


def test_a_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph(accepted=LAZY_CYCLES)) == []


def test_each_accepted_cycle_is_a_lazy_import_that_closes_one():
    edges = import_edges()
    for module, target in LAZY_CYCLES:
        # Inside a function only: at the top of the module it would be a
        # cycle Python cannot import.
        assert edges[module].get(target) is True, (module, target)
        # Still needed: without the entry there is a cycle through it.
        others = set(LAZY_CYCLES) - {(module, target)}
        found = cycles(import_graph(accepted=others))
        assert any({module, target} <= set(cycle) for cycle in found), (module, target)


def test_the_tasks_integration_imports_in_one_direction():
    """compat, results, backend, bridge: each imports only those before it."""
    layers = ["compat", "results", "backend", "bridge"]
    graph = import_graph()
    for index, layer in enumerate(layers):
        imported = {
            target.rpartition(".")[2]
            for target in graph[f"django_delayq.contrib.tasks.{layer}"]
            if target.startswith("django_delayq.contrib.tasks.")
        }
        assert imported <= set(layers[:index]), layer


def test_every_module_is_short_enough_to_read():
    """Past 400 lines a module holds more than one thing: split it."""
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
        and (lines := len(path.read_text().splitlines())) > 400
    }
    assert long == {}


def test_schedule_and_task_schedule_take_the_same_options():
    spelled_out = set(inspect.signature(schedule).parameters) - {"fn_or_name"}
    assert spelled_out == set(ScheduleOptions.__optional_keys__)
    # Task.schedule() takes exactly those, as **options: ScheduleOptions.
    kinds = [p.kind for p in inspect.signature(Task.schedule).parameters.values()]
    assert kinds == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,  # self
        inspect.Parameter.VAR_KEYWORD,
    ]


@pytest.mark.parametrize(
    ("twin", "original"),
    [
        (aschedule, schedule),
        (aschedule_many, schedule_many),
        (acancel, cancel),
        (areschedule, reschedule),
        (aretry, retry),
    ],
)
def test_each_async_twin_takes_the_arguments_of_its_sync_twin(twin, original):
    def parameters(function: object) -> list[tuple[str, object, object]]:
        signature = inspect.signature(function)  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in signature.parameters.values()]

    assert inspect.iscoroutinefunction(twin)
    assert parameters(twin) == parameters(original)
    kinds = [p.kind for p in inspect.signature(Task.aschedule).parameters.values()]
    assert kinds == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,  # self
        inspect.Parameter.VAR_KEYWORD,
    ]


def test_every_check_id_is_defined_once_and_documented():
    from django_delayq import check_ids

    documented = set(
        re.findall(r"^#{2,3} `(delayq\.[EW]\d{3})`", DOCS_CHECKS.read_text(), re.M)
    )
    assert set(check_ids.ALL) == documented
    assert len(set(check_ids.ALL)) == len(check_ids.ALL)
    # Nowhere else is an id written as a string.
    spelled = {
        path.name
        for path in PACKAGE.rglob("*.py")
        if path.name != "check_ids.py"
        and re.search(r"[\"']delayq\.[EW]\d{3}[\"']", path.read_text())
    }
    assert spelled == set()


def test_the_contributors_page_lists_every_module():
    listed = set(
        re.findall(
            r"^\| `(django_delayq/[\w/]+\.py)` \|", CONTRIBUTING.read_text(), re.M
        )
    )
    present = {
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    }
    assert listed == present
