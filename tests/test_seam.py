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
from efface.origin.capabilities import GroupCommit, HeldInMemory, UncheckedRanking
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


@pytest.mark.parametrize("origin", ["sqlite", "memory"])
def test_a_snapshot_can_demand_that_it_holds_an_epoch(tmp_path, origin):
    """A read that must see an erasure (one another process acknowledged, say) demands its
    epoch: a state that does not hold it yet is refused, never served silently."""
    with efface.open(str(tmp_path / "s"), embedder="hashing", origin=origin, background=False) as store:
        store.write("k", "a note about tea", tenant="t", subject="s", purpose="p")
        epoch = store.forget(tenant="t", key="k").epoch
        with store._origin.snapshot(at_least=epoch) as snap:
            assert snap.current_epoch() >= epoch
        with pytest.raises(efface.ErasureNotSettled) as refused, store._origin.snapshot(at_least=epoch + 3):
            pass
        assert (refused.value.required_epoch, refused.value.applied_epoch) == (epoch + 3, epoch)


@pytest.mark.parametrize("origin", ["sqlite", "memory"])
def test_each_origin_names_its_own_structural_checks(tmp_path, origin):
    with efface.open(str(tmp_path / "s"), embedder="hashing", origin=origin, background=False) as store:
        store.write("k", "a note about green tea", tenant="t", subject="s", purpose="p")
        receipt = store.forget(tenant="t", key="k")
        store.wait(receipt.handle, 30)
        names = {c.name for c in store.verify(receipt.handle).checks}
    assert ("origin.wal" in names) == (origin == "sqlite")  # a WAL is the SQLite origin's, not every origin's


def _changes(store) -> list[int]:
    return sorted({e for e, *_ in store._origin.changes_since(0)})


def test_the_change_log_is_kept_for_every_live_consumer(tmp_path):
    """Another process's ANN files (a consumer that said recently it replays from epoch 2)
    hold the change log back; one silent for longer than STALE_S no longer does."""
    import time

    from efface.erasure.changelog import STALE_S
    from efface.origin.base import CHANGES_CONSUMER

    with efface.open(str(tmp_path / "s"), embedder="hashing", background=False) as store:
        o = store._origin
        o.meta_set(CHANGES_CONSUMER + "ann.other", f"2 {time.time():.0f}")
        for i in range(6):
            store.write(f"k{i}", f"note {i} about tea", tenant="t", subject="s", purpose="p")
        store.compact()
        assert _changes(store) and min(_changes(store)) == 3  # kept after the other's epoch 2
        o.meta_set(CHANGES_CONSUMER + "ann.other", f"2 {time.time() - STALE_S - 60:.0f}")
        store.write("k9", "one more note", tenant="t", subject="s", purpose="p")
        store.compact()
        assert not _changes(store) or min(_changes(store)) > 7  # the silent one holds nothing back


def test_files_older_than_the_pruned_log_are_rebuilt_from_the_origin(tmp_path):
    """A process that comes back after the log was pruned past its files cannot replay them:
    it builds its index from the origin's records, and finds every live one."""
    from efface.origin.base import CHANGES_PRUNED
    from efface.paths.ann import VectorIndex

    with efface.open(str(tmp_path / "s"), embedder="hashing", background=False) as store:
        for i in range(20):
            store.write(f"k{i}", f"note {i} about tea", tenant="t", subject="s", purpose="p")
        store.forget(tenant="t", key="k3")
        store.compact()
        o = store._origin
        o.meta_set(CHANGES_PRUNED, str(o.current_epoch()))
        old = tmp_path / "away"
        old.mkdir()
        (old / "stale.usearch").write_bytes(b"an index saved long ago")
        ann = VectorIndex(o, str(old), store.embedder.dim, lambda t: "t" + store._hash("tenant-file", t), instance="b")
        assert not (old / "stale.usearch").exists()
        assert ann.applied_epoch() == o.current_epoch()
        tenant = store._tenant("t")
        held = sum(ann.holding(tenant, [rid]) for rid, _ in o.records_of_tenant(tenant))
        assert held == 19 == ann.size(tenant)
        ann.close()
