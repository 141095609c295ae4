"""The package's structure: a folder per component, layers that import only
downward, no import cycles, the components importing in one direction,
Redis behind the store, one definition of the options, the check ids in one
place.

The import graph is read from the source by :mod:`tools.import_graph`
(every ``import``, also inside functions, which hides a cycle but does not
remove it; and the packages an import runs on the way, whose ``__init__``
re-exports), so a cycle fails here before it makes a refactor painful. The
layers are declared there (``LAYERS``). The one kind of cycle accepted is
Django's own habit (``Task.get_backend()`` imports its backends): a method
importing, inside itself, a module that imports its module. Each is listed
in ``LAZY_CYCLES`` with why, and must stay inside its function.

There is no cap on a module's length: one concern per module, and a module
that reads top to bottom beats several that import each other. What is
capped is how many modules stand side by side (:data:`ROOT_LIMIT`,
:data:`FOLDER_LIMIT`): past that, a folder no longer shows its design.
"""

from __future__ import annotations

import ast
import inspect
import re
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
from tools.import_graph import (
    LAYERS,
    LAZY_CYCLES,
    PICTURE,
    cycles,
    import_edges,
    import_graph,
    inside,
    layer_of,
    module_name,
    packages_on_the_way,
    picture,
    reachable,
    upward_imports,
)

PACKAGE = Path(__file__).resolve().parents[2] / "django_delayq"
DOCS_CHECKS = PACKAGE.parent / "docs" / "reference" / "checks.md"
CONTRIBUTING = PACKAGE.parent / "docs" / "contributing.md"


#: Modules at the package's root, besides ``__init__``: the public API and
#: the row's rules. A new one belongs in a component's folder, most likely.
ROOT_LIMIT = 20
#: Modules in a folder, besides ``__init__``.
FOLDER_LIMIT = 12
#: Folders allowed more, and why.
LARGER_FOLDERS = {
    "django_delayq/store": (
        19,
        "one module per kind of key (due-sets, streams, leases, wake lists, "
        "the limits' state, the paused queues...) and per concern of the "
        "connection: each is what a loop asks of Redis",
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
REDIS_IMPORTERS = (
    "django_delayq.store",
    "django_delayq.exceptions",
    # What redis-py makes of a URL, without connecting: part of reading
    # REDIS_URL, below the store.
    "django_delayq.conf.redis_urls",
)


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


def test_every_module_is_in_a_layer_and_imports_only_downward():
    graph = import_graph()
    for module in graph:
        layer_of(module)  # raises for a module no layer names
    assert upward_imports(graph) == []


def test_an_upward_import_is_found():
    graph = {"django_delayq.models": {"django_delayq.api"}, "django_delayq.api": set()}
    assert upward_imports(graph) == [("django_delayq.models", "django_delayq.api")]
    assert [name for name, _, _ in LAYERS][layer_of("django_delayq.worker.loop")] == (
        "components"
    )


def test_no_production_module_imports_the_test_toolkit():
    """The test modes are chosen by a dotted path in the settings, as Django
    chooses a backend: nothing outside ``testing/`` imports it, directly or
    through another module (the management commands excepted: they refuse
    to run under a test mode and say which)."""
    graph = import_graph(accepted=LAZY_CYCLES)
    reaching = sorted(
        module
        for module in graph
        if not inside(module, "django_delayq.testing")
        and any(inside(t, "django_delayq.testing") for t in reachable(graph, module))
    )
    assert reaching == []


def test_the_contributors_picture_is_drawn_from_the_code():
    assert PICTURE.read_text() == picture(import_graph()), (
        "run: python -m tools.import_graph --svg docs/_static/import-graph.svg"
    )


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


TESTS = PACKAGE.parent / "tests"
#: The folders of tests/ that are not a folder of the package, and why.
TEST_FOLDERS = {
    "api": "the public API: api.py, changes.py, lookups.py",
    "rows": "the row's other rules at the package's root",
    "reporting": "status.py, health.py and metrics/",
    "acceptance": "the commands as processes; users' projects of their own",
    "faults": "the stores lost and the processes killed, against the invariants",
    "upgrade": "a deploy: the previous release beside the current one",
    "browser": "the admin and the example shop in headless Chromium",
    "docs": "every test of the documentation",
    "package": "the package's layout and layers",
    "benchmarks": "the benchmark harness's own tests",
    "support": "code the tests share",
    "testapp": "the Django app of the tests' tasks and models",
    "discovered": "an app whose tasks module is found by autodiscovery",
    "backends": "a database backend that says it is MySQL",
}


def test_the_tests_mirror_the_package():
    """tests/ holds a folder per component of the package (or per suite,
    listed with why), each under the package's folder cap, and no test
    module of its own."""
    components = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if (p / "__init__.py").exists()}
    assert folders - components - set(TEST_FOLDERS) == set()
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    too_many = {}
    for init in TESTS.rglob("__init__.py"):
        modules = [p for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > FOLDER_LIMIT:
            too_many[str(init.parent.relative_to(TESTS.parent))] = len(modules)
    assert too_many == {}


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
        if path != PACKAGE / "conf" / "check_ids.py"
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
