"""The CrewAI memory storage on efface: differential against CrewAI's own LanceDBStorage (its
default backend), CrewAI's ``Memory`` on it without an LLM, and forgets that are real erasures.

The differential test runs the same random sequences of ``save`` (new ids, ids saved again in
another scope), ``update``, ``get_record``, ``list_records``, ``search``, ``list_scopes``,
``list_categories``, ``count``, ``get_scope_info``, ``delete`` (by ids, categories, metadata)
and ``reset(scope)`` on both and compares every result. Where the two differ on purpose:

* ``delete(scope_prefix=...)`` alone: LanceDBStorage's predicate (``scope LIKE 'p%' OR scope =
  '/' AND ...``) also deletes the root scope's records and matches ``/ab`` for ``/a``; here a
  scope prefix is that scope and the scopes under it, as ``reset`` is in both. Not compared;
  tested on its own below;
* ``delete(record_ids=...)`` beside another criterion: LanceDBStorage ignores the ids beside
  categories or a metadata filter, and the age beside ids alone; here every criterion given
  must hold. Compared when the ids come alone, or no ids;
* ``created_at`` and ``last_accessed`` go through JSON here: compared to the microsecond.

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``). CrewAI needs ``mcp<2`` and ``pydantic<2.13``, so CI runs
this module in its own virtual environment (docs/dependencies.md).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import efface
from efface.embed import resolve

from peer_stores import require_framework

# CrewAI sends telemetry and traces to its servers; offline each attempt waits for a timeout
# (10 s a Memory here). Its own switches turn them off, before it is imported.
for _name, _value in (
    ("CREWAI_DISABLE_TELEMETRY", "true"),
    ("OTEL_SDK_DISABLED", "true"),
    ("CREWAI_TRACING_ENABLED", "false"),
):
    os.environ.setdefault(_name, _value)

require_framework("crewai", "crewai", venv="crewai")

from crewai.memory.storage.backend import StorageBackend  # noqa: E402
from crewai.memory.storage.lancedb_storage import LanceDBStorage  # noqa: E402
from crewai.memory.types import MemoryRecord  # noqa: E402
from crewai.memory.unified_memory import Memory  # noqa: E402

from efface.compat.crewai import EffaceStorage  # noqa: E402

HTTP_CONTRACT = True

EMBED = resolve("hashing", None)
WORDS = ["tea", "green", "flowerpot", "Lisbon", "refund", "garden"]
SCOPES = st.sampled_from(["/", "/users", "/users/alice", "/users/bob", "/team/x y"])
IDS = st.sampled_from(["r1", "r2", "r3", "r/4"])
RECORDS = st.builds(
    lambda i, scope, words, cats, n, src, age: (i, scope, " ".join(words), cats, n, src, age),
    IDS,
    SCOPES,
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    st.lists(st.sampled_from(["pref", "fact"]), max_size=2, unique=True),
    st.integers(0, 2),
    st.sampled_from(["alice", "bob"]),
    st.integers(0, 3),
)
OPS = st.one_of(
    st.tuples(st.just("save"), st.lists(RECORDS, min_size=1, max_size=3)),
    st.tuples(st.just("save"), st.lists(RECORDS, min_size=1, max_size=3)),
    st.tuples(st.just("update"), RECORDS),
    st.tuples(st.just("get"), IDS),
    st.tuples(st.just("list"), st.one_of(st.none(), SCOPES), st.integers(1, 5), st.integers(0, 2)),
    st.tuples(st.just("search"), st.sampled_from(WORDS), st.one_of(st.none(), SCOPES), st.integers(1, 5)),
    st.tuples(st.just("scopes"), SCOPES),
    st.tuples(st.just("categories"), st.one_of(st.none(), SCOPES)),
    st.tuples(st.just("count"), st.one_of(st.none(), SCOPES)),
    st.tuples(st.just("info"), SCOPES),
    st.tuples(
        st.just("delete"),
        st.one_of(st.none(), st.lists(IDS, min_size=1, max_size=2)),
        st.one_of(st.none(), st.just(["pref"])),
        st.one_of(st.none(), st.just({"n": 1})),
        st.one_of(st.none(), st.integers(1, 3)),
    ),
    st.tuples(st.just("reset"), st.sampled_from(["/users", "/users/alice", "/team/x y"])),
)
T0 = dt.datetime(2027, 1, 1, 12, 0, 0)


def _record(spec) -> MemoryRecord:
    i, scope, content, cats, n, src, age = spec
    at = T0 - dt.timedelta(days=age)
    return MemoryRecord(
        id=i,
        content=content,
        scope=scope,
        categories=cats,
        metadata={"n": n},
        importance=0.5,
        created_at=at,
        last_accessed=at,
        source=src,
        embedding=EMBED.embed([content])[0].tolist(),
    )


def _row(r: MemoryRecord | None):
    if r is None:
        return None
    return (r.id, r.content, r.scope, tuple(r.categories), tuple(sorted(r.metadata.items())), r.source, r.created_at)


def _apply(ref: LanceDBStorage, ours: EffaceStorage, op) -> None:
    kind = op[0]
    if kind == "save":
        recs = [_record(s) for s in op[1]]
        # LanceDBStorage appends a row per save: an id saved twice (in one call or again later)
        # makes two rows. CrewAI's Memory never does that (new records get new uuids; changes go
        # through update), so the reference is given what Memory gives it: update for a known id.
        for r in {r.id: r for r in recs}.values():
            if ref.get_record(r.id) is None:
                ref.save([r])
            else:
                ref.update(r)
        ours.save(list({r.id: r for r in recs}.values()))
    elif kind == "update":
        r = _record(op[1])
        if ref.get_record(r.id) is None:
            return
        ref.update(r)
        ours.update(r)
    elif kind == "get":
        assert _row(ours.get_record(op[1])) == _row(ref.get_record(op[1]))
    elif kind == "list":
        _, scope, limit, offset = op
        got = [_row(r) for r in ours.list_records(scope, limit=limit, offset=offset)]
        want = [_row(r) for r in ref.list_records(scope, limit=limit, offset=offset)]
        assert [g[6] for g in got] == [w[6] for w in want]  # newest first (ties: any order)
        everything = {_row(r) for r in ref.list_records(scope, limit=1000)}
        assert set(got) <= everything
    elif kind == "search":
        _, word, scope, limit = op
        q = EMBED.embed([word])[0].tolist()
        got = [(_row(r), round(s, 4)) for r, s in ours.search(q, scope_prefix=scope, limit=limit)]
        want = [(_row(r), round(s, 4)) for r, s in ref.search(q, scope_prefix=scope, limit=limit)]
        assert [s for _, s in got] == [s for _, s in want]
        assert {r for r, _ in got} <= {_row(r) for r in ref.list_records(scope, limit=1000)}
    elif kind == "scopes":
        assert ours.list_scopes(op[1]) == ref.list_scopes(op[1])
    elif kind == "categories":
        assert ours.list_categories(op[1]) == ref.list_categories(op[1])
    elif kind == "count":
        assert ours.count(op[1]) == ref.count(op[1])
    elif kind == "info":
        a, b = ours.get_scope_info(op[1]), ref.get_scope_info(op[1])
        assert (a.path, a.record_count, a.categories, a.child_scopes) == (
            b.path,
            b.record_count,
            b.categories,
            b.child_scopes,
        )
        assert (a.oldest_record, a.newest_record) == (b.oldest_record, b.newest_record)
    elif kind == "delete":
        _, ids, cats, meta, days = op
        older = None if days is None else T0 - dt.timedelta(days=days) + dt.timedelta(seconds=1)
        if not (ids or cats or meta or older):
            return  # a scope alone: a deliberate difference (module docstring)
        if ids and (older or cats or meta):
            return  # LanceDBStorage uses record_ids only alone (module docstring)
        kw = {"record_ids": ids, "categories": cats, "metadata_filter": meta, "older_than": older}
        assert ours.delete(**kw) == ref.delete(**kw)
        assert len(ours.last_deletion) == len([r for r in ours.last_deletion if r.erased])
    elif kind == "reset":
        ref.reset(op[1])
        ours.reset(op[1])
        assert ours.last_receipt is not None
    assert sorted(_row(r) for r in ours.list_records(limit=1000)) == sorted(
        _row(r) for r in ref.list_records(limit=1000)
    )


START = (
    "save",
    [
        ("r1", "/users/alice", "tea green", ["pref"], 1, "alice", 0),
        ("r2", "/users/alice/notes", "flowerpot Lisbon", ["fact"], 2, "alice", 2),
        ("r3", "/users/bob", "refund garden", ["pref", "fact"], 1, "bob", 1),
        ("r/4", "/", "garden tea", [], 0, "bob", 3),
    ],
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=10))
@example(ops=[("delete", None, None, {"n": 1}, None), ("delete", None, ["fact"], None, 2), ("reset", "/users")])
def test_same_results_as_crewai_lancedb_storage(store, tmp_path_factory, ops):
    ours = EffaceStorage(store, tenant="acme", key_prefix=f"crewai-{uuid.uuid4().hex[:8]}/")
    ref = LanceDBStorage(path=str(tmp_path_factory.mktemp("lancedb")), vector_dim=EMBED.dim)
    try:
        for op in [START, *ops]:  # records to start from, so most random ops meet some
            _apply(ref, ours, op)
    finally:
        ref.close() if hasattr(ref, "close") else None


@pytest.fixture
def storage(store):
    return EffaceStorage(store, tenant="acme")


def test_is_a_crewai_storage_backend(storage):
    assert isinstance(storage, StorageBackend)


def test_a_scope_prefix_is_that_scope_and_below(storage, store):
    for i, scope in enumerate(["/", "/users", "/users/alice", "/users/alice/notes", "/users/alicia"]):
        storage.save([_record((f"r{i}", scope, f"note number {i} about the house", [], 0, "alice", 0))])
    assert storage.delete(scope_prefix="/users/alice") == 2
    (receipt,) = storage.last_deletion
    assert sorted(receipt.erased) == ["crewai/users/alice/#r2", "crewai/users/alice/notes/#r3"]
    assert sorted(r.scope for r in storage.list_records()) == ["/", "/users", "/users/alicia"]
    assert store.wait(receipt.handle, timeout=30).erased and store.verify(receipt.handle).level == "erased"


def test_crewai_memory_on_efface_without_an_llm(storage, store):
    # Every field given to remember() and depth="shallow": CrewAI calls no LLM (its docs' advice).
    memory = Memory(storage=storage, embedder=lambda texts: EMBED.embed(list(texts)).tolist(), llm="gpt-4o-mini")
    memory.remember(
        "Alice keeps the spare key under the blue flowerpot",
        scope="/users/alice",
        categories=["home"],
        importance=0.9,
        source="alice",
    )
    memory.remember(
        "Bob waters the garden on Sundays", scope="/users/bob", categories=["home"], importance=0.4, source="bob"
    )
    memory.drain_writes()
    hits = memory.recall("spare key flowerpot", scope="/users/alice", depth="shallow", source="alice")
    assert [m.record.content for m in hits] == ["Alice keeps the spare key under the blue flowerpot"]
    assert memory.list_scopes("/users") == ["/users/alice", "/users/bob"]
    assert [
        c.subject for m in store.scan(tenant="acme", purpose="memory", prefix="crewai/users/alice/") for c in m.claims
    ] == ["alice"]
    assert memory.forget(scope="/users/alice") == 1  # CrewAI's forget: the count ...
    receipt = storage.last_receipt  # ... and here the receipt
    assert receipt.selector.prefix == "crewai/users/alice/" and len(receipt.erased) == 1
    assert memory.recall("spare key flowerpot", scope="/users/alice", depth="shallow") == []
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.verify(receipt.handle).level == "erased"
    memory.reset()
    assert storage.count() == 0 and len(storage.last_receipt.erased) == 1
    with pytest.raises(efface.InvalidInput, match="subject"):
        storage.save([MemoryRecord(content="nobody's", scope="/x")])
