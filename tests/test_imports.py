"""The import graph of ``src/efface``: no circles, no room importing one that imports it, and no
module over the size limit anywhere.

The graph is read from the source (``ast``), not from ``sys.modules``, so an import inside a
function counts as much as one at the top of a module: a lazy import hides a circle from
the interpreter, not from a reader. An import under ``if TYPE_CHECKING:`` counts too: it never
runs, but it says the module is written against the other, and a circle closed through it is
still a circle for a reader (and for the next change, that makes it run). ``from pkg import
name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``; an import of
``pkg.mod`` is an edge to ``pkg.mod`` only (the package's ``__init__`` that Python runs on the
way is not counted as an import of the module's own).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = SRC / "efface"

_BEING_FIXED: set[frozenset[str]] = set()
"""Known circles being removed elsewhere (issue #9), as pairs of modules, e.g.
``frozenset({"efface.store", "efface.erasure.verify"})``. Each pair's edges (both ways) are
ignored by test_no_import_cycles; once its circle is gone, test_being_fixed_is_still_needed
fails until the pair is deleted here. Empty: on beb9dfe the only circles were ``cli`` <->
``demo`` (gone with the cli package) and ``erasure.verify`` <-> ``store``; the last ones,
closed through ``if TYPE_CHECKING:`` imports (``origin.sqlite``'s parts and ``SQLiteOrigin``,
``errors`` and the gate, ``origin.memory`` and its word index), went with issue #34."""

_SIZE_LIMIT = 600
"""Lines a module of src/efface may have at most, in any folder."""

_BENEATH_THE_STORE = ("efface.assembly", "efface.chokepoint", "efface.forgetting", "efface.reading", "efface.writing")
"""The store's own helpers: ``Store`` calls them, and they never import ``efface.store`` or
the ``efface`` package (which imports it) back."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, those in the body of ``if TYPE_CHECKING:`` included."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of efface."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_package = path.name == "__init__.py"
        package = mod if is_package else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    targets.append(sub if sub in modules else origin)
            for target in targets:
                hit = _resolve(target, modules)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _without_being_fixed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if frozenset({m, t}) not in _BEING_FIXED} for m, targets in graph.items()}


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "efface.erasure.certificate" in graph["efface.store"]  # inside Store.certificate
    assert "efface.cli.demo" in graph["efface.cli.admin"]  # inside the demo command


def test_the_graph_sees_type_checking_imports():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .store import Store\n")
    assert [n.module for n in _imports(tree) if isinstance(n, ast.ImportFrom)] == ["typing", "store"]
    assert "efface.store" in import_graph()["efface.peers.efface_store"]  # Store, for its type only


def test_no_import_cycles():
    found = cycles(_without_being_fixed(import_graph()))
    assert not found, "import circles between modules of src/efface: " + "; ".join(" <-> ".join(c) for c in found)


def test_being_fixed_is_still_needed():
    graph = import_graph()
    stale = [sorted(p) for p in _BEING_FIXED if not any(set(p) <= set(c) for c in cycles(graph))]
    assert not stale, f"these circles are gone: delete them from _BEING_FIXED: {stale}"


def test_every_audit_kind_resolves_to_its_driver():
    from efface.audit.kinds import KINDS, driver_class

    for kind in KINDS:  # the peer modules import their store's library lazily: no extra needed
        assert driver_class(kind).kind == kind


def test_audit_reaches_peers_only_through_its_registry():
    graph = import_graph()
    for mod, targets in graph.items():
        if mod.startswith("efface.audit"):
            assert not {t for t in targets if t.startswith("efface.peers")}, mod
        if mod.startswith("efface.adapters") and mod != "efface.adapters":
            assert targets and all(t.startswith("efface.peers") for t in targets), f"{mod} is not only an alias"


def test_no_module_over_the_size_limit():
    files = _modules().values()
    assert len(files) > 100 and ROOT / "store.py" in files and ROOT / "origin" / "sqlite" / "text.py" in files
    big = {
        str(p.relative_to(SRC)): n
        for p in sorted(files)
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > _SIZE_LIMIT
    }
    assert not big, f"modules over {_SIZE_LIMIT} lines: {big}"


def test_the_stores_helpers_sit_beneath_it():
    graph = import_graph()
    for mod in _BENEATH_THE_STORE:
        assert mod in graph, f"{mod} is gone: update _BENEATH_THE_STORE"
        assert not graph[mod] & {"efface", "efface.store"}, f"{mod} imports the store it sits beneath"
    assert set(_BENEATH_THE_STORE) <= graph["efface.store"]


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "efface"


def test_folders_import_one_way():
    """No two top-level rooms of the package import each other (origin, paths, erasure,
    backups, derivations, gate, audit, peers, cli, ...): the floors of docs/architecture.md.
    An import for a type alone (``if TYPE_CHECKING:``) runs back up a floor as much as any."""
    edges = {
        (_folder(a), _folder(b)) for a, targets in import_graph().items() for b in targets if _folder(a) != _folder(b)
    }
    both_ways = sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})
    assert not both_ways, f"rooms importing each other: {both_ways}"
