"""The origin and read-path seam is declared, not probed (issue #34): the store, the erasure
machinery, derivations, backups and the read paths use only members the protocols of
``efface.origin.base`` and ``efface.paths.base`` declare, and ask for an optional capability
with ``isinstance`` on a ``runtime_checkable`` protocol, so mypy checks every use. A
``getattr``/``hasattr`` with a literal name there would be a member no protocol declares."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import efface
from efface.embed import Lexical, QueryEmbedder
from efface.origin.base import GroupCommit, HeldInMemory, UncheckedRanking
from efface.paths.base import Scoring, Seeing, VectorSearch

ROOT = Path(__file__).resolve().parent.parent / "src" / "efface"
CORE = [ROOT.glob("*.py"), *(ROOT.joinpath(d).rglob("*.py") for d in ("erasure", "paths", "derivations", "backups"))]


def _probes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in ("getattr", "hasattr") or len(node.args) < 2:
            continue
        target, name = node.args[0], node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            continue  # a computed name: a field of one's own dataclass, not a probe of a collaborator
        if (isinstance(target, ast.Attribute) and target.attr == "_local") or (
            isinstance(target, ast.Name) and target.id == "_local"
        ):
            continue  # a thread-local's slot, not a member of a collaborator
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(..., {name.value!r})")
    return found


def test_the_core_probes_no_member_by_name():
    probes = [p for files in CORE for path in files for p in _probes(path)]
    assert probes == [], "declare these members on a protocol instead:\n" + "\n".join(probes)


@pytest.mark.parametrize("origin", ["sqlite", "memory"])
def test_each_origin_declares_what_it_has(tmp_path, origin):
    with efface.open(str(tmp_path / "s"), embedder="hashing", origin=origin, background=False) as store:
        o, paths = store._origin, {p.name: p for p in store._paths}
        assert (o.physical is not None) == (origin == "sqlite")
        assert (o.liveness is not None) == (origin == "sqlite")
        assert isinstance(o, GroupCommit) == (origin == "sqlite")
        assert isinstance(o.text, UncheckedRanking) == (origin == "sqlite")
        assert isinstance(o.text, HeldInMemory) == (origin == "sqlite")
        assert isinstance(paths["ann"], VectorSearch) and isinstance(paths["ann"], Seeing)
        assert isinstance(paths["fts"], Scoring) and not isinstance(paths["fts"], VectorSearch)
        assert isinstance(store.embedder, Lexical) and not isinstance(store.embedder, QueryEmbedder)
