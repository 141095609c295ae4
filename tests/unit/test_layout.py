"""The package's structure: a folder per component, no import cycles, the
components importing in one direction, Redis behind the store, one
definition of the options, the check ids in one place.

The import graph is read from the source (every ``import``, also inside
functions, which hides a cycle but does not remove it; and the packages an
import runs on the way, whose ``__init__`` re-exports), so a cycle fails
here before it makes a refactor painful. The one kind of cycle accepted is
Django's own habit (``Task.get_backend()`` imports its backends): a method
importing, inside itself, a module that imports its module. Each is listed
in :data:`LAZY_CYCLES` with why, and must stay inside its function.

There is no cap on a module's length: one concern per module, and a module
that reads top to bottom beats several that import each other. What is
capped is how many modules stand side by side (:data:`ROOT_LIMIT`,
:data:`FOLDER_LIMIT`): past that, a folder no longer shows its design.
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
        "Task.schedule() and Task.aschedule() call schedule() and aschedule(), "
        "whose module imports the registry"
    ),
}


#: Modules at the package's root, besides ``__init__``: the public API and
#: the row's rules. A new one belongs in a component's folder, most likely.
ROOT_LIMIT = 20
#: Modules in a folder, besides ``__init__``.
FOLDER_LIMIT = 12
#: Folders allowed more, and why.
LARGER_FOLDERS = {
    "django_delayq/store": (
        17,
        "one module per kind of key (due-sets, streams, leases, wake lists...) "
        "and per concern of the connection: each is what a loop asks of Redis",
    ),
}

#: The components and the components each must not import (even through
#: another module): the three loops know nothing of each other, and the
#: supervisor runs workers, not the other way round.
FORBIDDEN = {
    "django_delayq.dispatcher": (
        "django_delayq.worker",
        "django_delayq.sweeper",
        "django_delayq.supervisor",
    ),
    "django_delayq.worker": (
        "django_delayq.dispatcher",
        "django_delayq.sweeper",
        "django_delayq.supervisor",
    ),
    "django_delayq.sweeper": (
        "django_delayq.worker",
        "django_delayq.dispatcher",
        "django_delayq.supervisor",
    ),
    "django_delayq.supervisor": ("django_delayq.dispatcher", "django_delayq.sweeper"),
    "django_delayq.reconcile": (
        "django_delayq.worker",
        "django_delayq.dispatcher",
        "django_delayq.sweeper",
        "django_delayq.supervisor",
    ),
}

#: The only modules that import redis-py: the store, and the exception that
#: carries a Redis error's kind across it.
REDIS_IMPORTERS = ("django_delayq.store", "django_delayq.exceptions")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges() -> dict[str, dict[str, bool]]:
    """Each module of the package -> the modules of the package it imports,
    each with whether only imports inside functions name it.

    Importing ``a.b.c`` runs ``a/b/__init__`` first: an import of a module in
    another folder is also an edge to that folder's package (and to each
    package on the way), unless the importer is inside it already.
    """
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
                    for reached in [target, *packages_on_the_way(name, target)]:
                        edges[name][reached] = edges[name].get(reached, True) and lazy
                    break
    return edges


def packages_on_the_way(importer: str, target: str) -> list[str]:
    """The packages whose ``__init__`` importing ``target`` from ``importer``
    runs: those above ``target`` that ``importer`` is not inside."""
    parts = target.split(".")
    found = []
    for end in range(2, len(parts)):
        package = ".".join(parts[:end])
        if not (importer == package or importer.startswith(package + ".")):
            found.append(package)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


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


def test_importing_a_module_in_a_folder_runs_its_package():
    assert packages_on_the_way("django_delayq.api", "django_delayq.db.inserts") == [
        "django_delayq.db"
    ]
    # From inside the folder, its package is already running.
    assert packages_on_the_way("django_delayq.db.inserts", "django_delayq.db.x") == []
    graph = import_graph()
    assert "django_delayq.db" in graph["django_delayq.api"]


def test_the_components_import_in_one_direction():
    graph = import_graph(accepted=LAZY_CYCLES)
    found = {}
    for component, forbidden in FORBIDDEN.items():
        for module in graph:
            if not inside(module, component):
                continue
            wrong = sorted(
                target
                for target in reachable(graph, module)
                if any(inside(target, other) for other in forbidden)
            )
            if wrong:
                found[module] = wrong
    assert found == {}


def test_the_sweeper_imports_no_worker_module():
    """Settling an attempt is :mod:`django_delayq.outcomes`, not the worker."""
    graph = import_graph(accepted=LAZY_CYCLES)
    for module in graph:
        if inside(module, "django_delayq.sweeper"):
            reached = reachable(graph, module)
            assert not any(inside(t, "django_delayq.worker") for t in reached), module


def test_metrics_attach_only_through_the_signals():
    """Nothing runs metrics code but their own receivers: besides the
    commands that serve them, no module imports :mod:`django_delayq.metrics`."""
    graph = import_graph()
    importers = {
        module
        for module, targets in graph.items()
        if any(inside(t, "django_delayq.metrics") for t in targets)
        and not inside(module, "django_delayq.metrics")
    }
    assert importers
    assert {m for m in importers if not inside(m, "django_delayq.management")} == set()


def test_only_the_store_imports_redis():
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(name == "redis" or name.startswith("redis.") for name in names):
                importers.add(module_name(path))
    assert importers, "the check reads no import of redis at all"
    assert {
        name
        for name in importers
        if not any(inside(name, allowed) for allowed in REDIS_IMPORTERS)
    } == set()


def test_a_folder_shows_its_design_at_a_glance():
    """At most :data:`ROOT_LIMIT` modules at the root and
    :data:`FOLDER_LIMIT` in a folder (or the larger number a folder is
    allowed, with why), ``__init__`` not counted."""
    sizes = {}
    for folder in [PACKAGE, *(p.parent for p in PACKAGE.rglob("__init__.py"))]:
        if "migrations" in folder.parts:
            continue
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        sizes[str(folder.relative_to(PACKAGE.parent))] = len(modules)
    too_many = {
        folder: count
        for folder, count in sizes.items()
        if count
        > (
            ROOT_LIMIT
            if folder == PACKAGE.name
            else LARGER_FOLDERS.get(folder, (FOLDER_LIMIT, ""))[0]
        )
    }
    assert too_many == {}
    # An allowance no folder needs any more goes.
    for folder in LARGER_FOLDERS:
        assert sizes[folder] > FOLDER_LIMIT, folder


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
    from django_delayq.checks import ids as check_ids

    documented = set(
        re.findall(r"^#{2,3} `(delayq\.[EW]\d{3})`", DOCS_CHECKS.read_text(), re.M)
    )
    assert set(check_ids.ALL) == documented
    assert len(set(check_ids.ALL)) == len(check_ids.ALL)
    # Nowhere else is an id written as a string.
    spelled = {
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "checks" / "ids.py"
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
