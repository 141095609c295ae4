"""The package's import graph, read from the source, and its layers.

    python -m tools.import_graph          # the layers, their modules, what breaks them
    python -m tools.import_graph --svg docs/_static/import-graph.svg
    python -m tools.import_graph --check  # exit 1: a layer broken, the picture stale

Every ``import`` counts, also inside functions (a lazy import hides a cycle
but does not remove it), and so do the packages an import runs on the way:
importing ``a.b.c`` runs ``a/b/__init__`` first, whose re-exports import
more. :data:`LAYERS` declares the order the package is built in; a module may
import its own layer and those below it, never one above.
``tests/package/test_layout.py`` holds the package to it, and the contributors'
page shows the picture this draws.
"""

from __future__ import annotations

import argparse
import ast
import functools
import html
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "django_delayq"
PICTURE = ROOT / "docs" / "_static" / "import-graph.svg"

#: The layers, bottom first: (name, what it holds, the modules in it). A
#: module belongs to the longest prefix that names it. A module imports its
#: own layer and those below; whatever is above it, it reaches through
#: signals (the metrics) or a dotted path in the settings (the test modes).
LAYERS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "foundations",
        "values, text and times every layer uses",
        (
            "django_delayq.exceptions",
            "django_delayq.ids",
            "django_delayq.timing",
            "django_delayq.text",
            "django_delayq.payload",
        ),
    ),
    (
        "settings",
        "DELAYQ, read and validated; the check ids its problems carry",
        ("django_delayq.conf",),
    ),
    (
        "storage",
        "the task table and its vendors' SQL; every Redis call",
        (
            "django_delayq.models",
            "django_delayq.db",
            "django_delayq.store",
        ),
    ),
    (
        "rows",
        "the rules of a task's row: schedule, change, settle, index",
        (
            "django_delayq.signals",
            "django_delayq.lookups",
            "django_delayq.options",
            "django_delayq.registry",
            "django_delayq.limits",
            "django_delayq.transitions",
            "django_delayq.changes",
            "django_delayq.outcomes",
            "django_delayq.outbox",
            "django_delayq.ownership",
            "django_delayq.tracing",
            "django_delayq.api",
            "django_delayq.queues",
        ),
    ),
    (
        "components",
        "the loops and what they run; the users' test toolkit",
        (
            "django_delayq.reconcile",
            "django_delayq.recurring",
            "django_delayq.dispatcher",
            "django_delayq.worker",
            "django_delayq.supervisor",
            "django_delayq.sweeper",
            "django_delayq.testing",
        ),
    ),
    (
        "reporting",
        "what operators read: status, health, metrics, the admin",
        (
            "django_delayq.status",
            "django_delayq.health",
            "django_delayq.metrics",
            "django_delayq.admin",
            # The commands' batched reads and changes, which the admin's
            # actions run too; the package's __init__ holds nothing.
            "django_delayq.management",
        ),
    ),
    (
        "integrations",
        "what Django loads: the app, its checks and commands, the Tasks backend",
        (
            "django_delayq",
            "django_delayq.apps",
            "django_delayq.backends",
            "django_delayq.checks",
            "django_delayq.contrib",
            "django_delayq.management.commands",
            "django_delayq.management.lifecycle",
            "django_delayq.management.processes",
            "django_delayq.management.metrics",
        ),
    ),
]


#: (module, imported module) -> why the import, made inside a function of
#: the module, may close a cycle: Django's own habit (``Task.get_backend()``
#: imports its backends), a method importing the module that imports its own.
LAZY_CYCLES = {
    ("django_delayq.registry", "django_delayq.api"): (
        "Task.schedule() and Task.aschedule() call schedule() and aschedule(), "
        "whose module imports the registry"
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def packages_on_the_way(importer: str, target: str) -> list[str]:
    """The packages whose ``__init__`` importing ``target`` from ``importer``
    runs: those above ``target`` that ``importer`` is not inside."""
    parts = target.split(".")
    found = []
    for end in range(2, len(parts)):
        package = ".".join(parts[:end])
        if not inside(importer, package):
            found.append(package)
    return found


@functools.cache
def import_edges() -> dict[str, dict[str, bool]]:
    """Each module of the package -> the modules of the package it imports,
    each with whether only imports inside functions name it.

    Read once per process (the layout tests ask many times); do not change
    what it returns."""
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


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to."""
    best = (-1, -1)
    for index, (_, _, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if inside(module, prefix) and len(prefix) > best[0]:
                best = (len(prefix), index)
    if best[1] < 0:
        raise LookupError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best[1]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each (module, imported module) where the import points to a layer above."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def component(module: str) -> str:
    """The box a module is drawn in: its folder, or itself at the root."""
    parts = module.split(".")
    return ".".join(parts[:2])


def picture(graph: dict[str, set[str]]) -> str:
    """An SVG of the layers, bottom up, each component a box, each import
    between two components an arrow (drawn once, however many modules)."""
    boxes: dict[int, list[str]] = {}
    for module in sorted(graph):
        name = component(module)
        if name == "django_delayq":
            continue
        row = boxes.setdefault(layer_of(name), [])
        if name not in row:
            row.append(name)
    box_w, box_h, gap_x, gap_y, label_w = 112, 26, 10, 54, 120
    width = label_w + max(len(r) for r in boxes.values()) * (box_w + gap_x) + gap_x
    height = len(LAYERS) * (box_h + gap_y) + gap_y
    where: dict[str, tuple[float, float]] = {}
    parts = []
    for index, (name, what, _) in enumerate(LAYERS):
        y = height - (index + 1) * (box_h + gap_y)
        parts.append(
            f"<g><title>{html.escape(what)}</title>"
            f'<text x="8" y="{y + 17}" class="layer">{index} {html.escape(name)}'
            "</text></g>"
        )
        for column, box in enumerate(boxes.get(index, [])):
            x = label_w + gap_x + column * (box_w + gap_x)
            where[box] = (x + box_w / 2, y)
            label = box.removeprefix("django_delayq.")
            parts.append(
                f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="4"/>'
                f'<text x="{x + box_w / 2}" y="{y + 17}" class="box">'
                f"{html.escape(label)}</text>"
            )
    arrows = sorted(
        {
            (component(module), component(target))
            for module, targets in graph.items()
            for target in targets
            if component(module) != component(target)
            and component(module) in where
            and component(target) in where
            and layer_of(component(module)) != layer_of(component(target))
        }
    )
    lines = []
    for source, target in arrows:
        (x1, y1), (x2, y2) = where[source], where[target]
        # From the bottom of the importer to the top of what it imports:
        # every arrow points down the page, as every import points down.
        lines.append(f'<line x1="{x1:.0f}" y1="{y1 + box_h}" x2="{x2:.0f}" y2="{y2}"/>')
    style = (
        "rect{fill:#eef3fb;stroke:#4a6fa5}"
        "line{stroke:#4a6fa5;stroke-opacity:.25;marker-end:url(#head)}"
        "text{font:11px sans-serif;fill:#222}"
        ".box{text-anchor:middle}.layer{font-weight:bold}.what{fill:#777}"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}">\n'
        "<!-- Drawn by python -m tools.import_graph from the code: do not edit. -->\n"
        f"<style>{style}</style>\n"
        '<defs><marker id="head" markerWidth="6" markerHeight="6" refX="5" refY="3"'
        ' orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#4a6fa5"/></marker></defs>\n'
        + "\n".join(lines)
        + "\n"
        + "\n".join(parts)
        + "\n</svg>\n"
    )


def report(graph: dict[str, set[str]]) -> str:
    lines = []
    for index, (name, what, _) in reversed(list(enumerate(LAYERS))):
        members = sorted(m for m in graph if layer_of(m) == index)
        lines.append(f"{index} {name}: {what}")
        lines.extend(f"    {member}" for member in members)
    wrong = upward_imports(graph)
    lines.append(f"upward imports: {len(wrong)}")
    lines.extend(f"    {module} -> {target}" for module, target in wrong)
    found = cycles(import_graph(accepted=LAZY_CYCLES))
    lines.append(f"cycles (besides {len(LAZY_CYCLES)} accepted): {len(found)}")
    lines.extend("    " + " <-> ".join(cycle) for cycle in found)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.import_graph", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--svg", type=Path, help="write the picture to this file")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"fail if a layer is broken or {PICTURE.relative_to(ROOT)} is stale",
    )
    args = parser.parse_args(argv)
    graph = import_graph()
    print(report(graph))
    drawn = picture(graph)
    if args.svg:
        args.svg.write_text(drawn)
        print(f"wrote {args.svg}")
    if args.check:
        if upward_imports(graph) or cycles(import_graph(accepted=LAZY_CYCLES)):
            return 1
        if not PICTURE.exists() or PICTURE.read_text() != drawn:
            print(
                f"{PICTURE.relative_to(ROOT)} is stale: run "
                f"python -m tools.import_graph --svg {PICTURE.relative_to(ROOT)}",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
