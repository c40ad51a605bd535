"""The LangGraph store on efface: differential against LangGraph's own InMemoryStore, langmem's
memory tools on it, and deletes and TTLs that are real erasures.

LangGraph ships no conformance suite for stores, so the differential test is the contract: the
same random operation sequences run against ``InMemoryStore`` and ``EffaceStore`` and every
result is compared. Where the two legitimately differ, the test says why:

* timestamps: each store stamps its own clock;
* a query search: InMemoryStore without an index ignores the query and lists; efface recalls
  (hybrid ANN + full text, RRF scores), so its hits must be a subset of what matches;
* the order of namespaces in a search over several: InMemoryStore keeps dict insertion order
  of namespaces, including ones emptied by deletes or created by a mere ``get`` (its
  ``defaultdict``); a persistent store has no such state, so EffaceStore places a namespace at
  its oldest live item. Items inside a namespace are in first-put order in both (checked
  exactly), and the whole page is checked exactly whenever the namespace orders agree;
* ``list_namespaces``: InMemoryStore also lists namespaces with no item left (the same
  defaultdict); PostgresStore and EffaceStore list namespaces that hold items, so the
  reference answer is InMemoryStore's own listing over its non-empty namespaces.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import efface
from efface.compat.langgraph import EffaceStore

from conftest import PG_MIGRATED, PgStores, backend_options, examples

LABELS = st.sampled_from(["a", "b", "c"])
NAMESPACES = st.lists(LABELS, min_size=1, max_size=3).map(tuple)
PREFIXES = st.lists(LABELS, min_size=0, max_size=3).map(tuple)
KEYS = st.sampled_from(["k1", "k2", "k3", "x..y"])
VALUES = st.fixed_dictionaries(
    {"n": st.integers(0, 3), "tag": st.sampled_from(["red", "blue"])},
    optional={"nested": st.fixed_dictionaries({"c": st.integers(0, 1)})},
)
FILTERS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"tag": st.sampled_from(["red", "blue"])}),
    st.fixed_dictionaries({"n": st.sampled_from([{"$gte": 2}, {"$lt": 1}, {"$ne": 1}, 3])}),
    st.just({"nested": {"c": 1}}),
)
OPS = st.one_of(
    st.tuples(st.just("put"), NAMESPACES, KEYS, VALUES),
    st.tuples(st.just("put"), NAMESPACES, KEYS, VALUES),
    st.tuples(st.just("delete"), NAMESPACES, KEYS),
    st.tuples(st.just("get"), NAMESPACES, KEYS),
    st.tuples(st.just("search"), PREFIXES, FILTERS, st.integers(0, 6), st.integers(0, 3)),
    st.tuples(st.just("query"), PREFIXES, FILTERS, st.integers(1, 6)),
    st.tuples(
        st.just("list"),
        st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=2).map(tuple)),
        st.one_of(st.none(), st.lists(st.sampled_from(["a", "c", "*"]), min_size=1, max_size=2).map(tuple)),
        st.one_of(st.none(), st.integers(1, 3)),
        st.integers(1, 10),
        st.integers(0, 2),
    ),
    st.tuples(st.just("batch"), NAMESPACES, KEYS, VALUES),
)


def _row(item):
    return None if item is None else (tuple(item.namespace), item.key, item.value)


def _grouped(rows):
    out: dict = {}
    for ns, key, value in rows:
        out.setdefault(ns, []).append((key, value))
    return out


def _ns_order(rows):
    return list(dict.fromkeys(ns for ns, _, _ in rows))


def _nonempty(ref: InMemoryStore) -> InMemoryStore:
    live = InMemoryStore()
    live._data.update({ns: items for ns, items in ref._data.items() if items})
    return live


def _run(ref: InMemoryStore, ours: EffaceStore, op) -> None:
    kind = op[0]
    if kind == "put":
        _, ns, key, value = op
        ref.put(ns, key, value)
        ours.put(ns, key, value)
    elif kind == "delete":
        _, ns, key = op
        ref.delete(ns, key)
        ours.delete(ns, key)
        assert ours.last_receipt is not None and ours.last_receipt.selector.key is not None
    elif kind == "get":
        _, ns, key = op
        assert _row(ours.get(ns, key)) == _row(ref.get(ns, key))
    elif kind == "search":
        _, prefix, flt, limit, offset = op
        full_ref = [_row(i) for i in ref.search(prefix, filter=flt, limit=1000)]
        full_ours = [_row(i) for i in ours.search(prefix, filter=flt, limit=1000)]
        assert _grouped(full_ours) == _grouped(full_ref)
        page_ref = [_row(i) for i in ref.search(prefix, filter=flt, limit=limit, offset=offset)]
        page_ours = [_row(i) for i in ours.search(prefix, filter=flt, limit=limit, offset=offset)]
        if _ns_order(full_ours) == _ns_order(full_ref):
            assert page_ours == page_ref
        else:
            assert len(page_ours) == len(page_ref)
    elif kind == "query":
        _, prefix, flt, limit = op
        matching = {(r[0], r[1]): r for r in (_row(i) for i in ref.search(prefix, filter=flt, limit=1000))}
        hits = ours.search(prefix, query="red blue n tag", filter=flt, limit=limit)
        assert len(hits) <= limit
        for h in hits:
            assert matching[(tuple(h.namespace), h.key)] == _row(h)
            assert isinstance(h.score, float)
    elif kind == "list":
        _, prefix, suffix, depth, limit, offset = op
        kw = {"prefix": prefix, "suffix": suffix, "max_depth": depth, "limit": limit, "offset": offset}
        assert ours.list_namespaces(**kw) == _nonempty(ref).list_namespaces(**kw)
    elif kind == "batch":
        # Reads in a batch see the state before it; the batch's put applies after them.
        _, ns, key, value = op
        ops = [GetOp(ns, key), PutOp(ns, key, value), GetOp(ns, key), SearchOp(ns[:1], None, 100, 0)]
        got_ref, got_ours = ref.batch(ops), ours.batch(ops)
        assert [_row(got_ours[0]), got_ours[1], _row(got_ours[2])] == [
            _row(got_ref[0]),
            got_ref[1],
            _row(got_ref[2]),
        ]
        assert _grouped([_row(i) for i in got_ours[3]]) == _grouped([_row(i) for i in got_ref[3]])


def test_same_results_as_langgraph_in_memory_store(backend, request):
    # A fresh store per example: on postgres a database of its own from the pool (conftest.PgPool),
    # emptied and handed back after the example; a quarter of the examples there (conftest.examples).
    pool = request.getfixturevalue("pg_pool") if backend == "postgres" else None

    @settings(
        max_examples=examples(backend, 60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(ops=st.lists(OPS, min_size=1, max_size=25))
    def same_results(ops):
        with tempfile.TemporaryDirectory() as tmp:
            where, options = os.path.join(tmp, "s"), backend_options(backend)
            databases = None
            if pool is not None:
                databases = PgStores(pool.server, Path(tmp), pool)
                options = databases.options(where)
                where = databases.url(where, PG_MIGRATED)
            try:
                store = efface.open(where, embedder="hashing", background=False, **options)
                try:
                    ours = EffaceStore(store, tenant="acme")
                    ref = InMemoryStore()
                    for op in ops:
                        _run(ref, ours, op)
                finally:
                    store.close()
            finally:
                if databases is not None:
                    databases.drop()

    same_results()


@pytest.fixture
def lg(store):
    return EffaceStore(store, tenant="acme")


@given(
    a=st.tuples(NAMESPACES, st.text(max_size=6).filter(lambda s: "\x00" not in s)),
    b=st.tuples(NAMESPACES, st.text(max_size=6).filter(lambda s: "\x00" not in s)),
)
def test_namespace_and_key_map_to_one_record_each(a, b):
    s = EffaceStore(object(), tenant="t")
    assert s._decode(s._key(*a)) == a
    assert (s._key(*a) == s._key(*b)) == (a == b)


def test_item_fields_as_langgraph_returns_them(lg, clock):
    lg.put(("alice", "prefs"), "k", {"food": "tea"})
    item = lg.get(("alice", "prefs"), "k")
    assert (item.namespace, item.key, item.value) == (("alice", "prefs"), "k", {"food": "tea"})
    assert item.created_at.tzinfo is not None and item.updated_at.timestamp() == clock.now
    first = item.created_at
    clock.advance(5)
    lg.put(("alice", "prefs"), "k", {"food": "coffee"})
    again = lg.get(("alice", "prefs"), "k")
    assert again.created_at == first and again.updated_at.timestamp() == clock.now
    (hit,) = lg.search(("alice",), query="coffee")
    assert hit.value == {"food": "coffee"} and hit.score > 0
    assert lg.search(("alice",))[0].score is None
    assert asyncio.run(lg.aget(("alice", "prefs"), "k")).value == {"food": "coffee"}


def test_delete_is_a_forget_that_reaches_erased(lg, store):
    lg.put(("alice",), "diary", {"text": "Alice hides the key under the blue flowerpot"})
    lg.delete(("alice",), "diary")
    assert lg.get(("alice",), "diary") is None
    receipt = lg.last_receipt
    assert receipt.erased == ("langgraph/alice..diary",)
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.verify(receipt.handle).level == "erased"
    assert not store.recall("blue flowerpot", tenant="acme", purpose="memory")


def test_forget_namespace_prefix_and_subject_with_receipts(lg, store):
    lg.put(("alice", "work"), "1", {"t": "a1"})
    lg.put(("alice", "work", "deep"), "2", {"t": "a2"})
    lg.put(("alice", "home"), "3", {"t": "a3"})
    lg.put(("bob", "work"), "4", {"t": "b4"})
    r = lg.forget_namespace(("alice", "work"))
    assert sorted(r.erased) == ["langgraph/alice.work..1", "langgraph/alice.work.deep..2"]
    assert lg.list_namespaces() == [("alice", "home"), ("bob", "work")]
    r = lg.forget_subject("bob")
    assert r.erased == ("langgraph/bob.work..4",) and lg.last_receipt is r
    assert lg.list_namespaces() == [("alice", "home")]
    assert lg.forget_key(("alice", "home"), "3").erased == ("langgraph/alice.home..3",)
    assert len(lg.receipts) == 3
    with pytest.raises(efface.InvalidInput):
        lg.forget_namespace(("*",))


def test_ttl_is_an_erasure_and_reads_refresh_it(lg, store, clock):
    lg.put(("alice",), "note", {"t": "short lived"}, ttl=1)  # minutes
    clock.advance(50)
    assert lg.get(("alice",), "note") is not None  # refreshes: now expires 60 s from here
    clock.advance(50)
    assert lg.search(("alice",), refresh_ttl=False)[0].key == "note"  # no refresh
    assert lg.get(("alice",), "note", refresh_ttl=False) is not None
    clock.advance(11)
    assert lg.get(("alice",), "note") is None and lg.search(("alice",)) == []
    assert lg.sweep_ttl() == 1
    receipt = lg.last_receipt
    assert receipt.kind == "expire" and receipt.erased == ("langgraph/alice..note",)
    assert store.wait(receipt.handle, timeout=30).erased


def test_default_ttl_from_ttl_config(store, clock):
    lg = EffaceStore(store, tenant="acme", ttl_config={"default_ttl": 2, "refresh_on_read": False})
    lg.put(("a",), "k", {"v": 1})
    clock.advance(100)
    assert lg.get(("a",), "k") is not None
    clock.advance(21)
    assert lg.get(("a",), "k") is None


def test_template_maps_tenant_subject_purpose(store):
    lg = EffaceStore(store, template=("tenant", "subject", "purpose"), purpose=None)
    lg.put(("acme", "alice", "support"), "k", {"v": 1})
    lg.put(("beta", "alice", "support"), "k", {"v": 2})
    assert store.read("langgraph/acme.alice.support..k", tenant="acme", purpose="support")
    assert store.read("langgraph/beta.alice.support..k", tenant="beta", purpose="support").claims[0].subject == "alice"
    assert [i.value for i in lg.search(("acme", "alice", "support"))] == [{"v": 1}]
    assert lg.list_namespaces(prefix=("beta", "alice", "support")) == [("beta", "alice", "support")]
    with pytest.raises(efface.InvalidInput, match="tenant"):
        lg.list_namespaces()
    with pytest.raises(efface.InvalidInput, match="purpose"):
        lg.put(("acme", "alice"), "k", {"v": 3})
    assert lg.forget_subject("alice", tenant="acme").erased == ("langgraph/acme.alice.support..k",)
    assert lg.get(("beta", "alice", "support"), "k").value == {"v": 2}


def test_bad_input_is_refused_clearly(lg):
    with pytest.raises(InvalidNamespaceError):
        lg.put(("a.b",), "k", {"v": 1})
    with pytest.raises(efface.InvalidInput, match="JSON"):
        lg.put(("a",), "k", {"v": object()})
    with pytest.raises(efface.InvalidInput, match="template"):
        EffaceStore(object(), template=("user",))
    for keep in (-1, 1.5, "10"):  # deque raised a raw ValueError or TypeError
        with pytest.raises(efface.InvalidInput, match="keep_receipts"):
            EffaceStore(object(), tenant="acme", keep_receipts=keep)
    assert lg.get(("a",), "never") is None and lg.search(("a",)) == [] and lg.list_namespaces() == []


def test_a_str_namespace_and_other_misread_arguments_are_refused(lg, store):
    """A str namespace passed LangGraph's own check (each character a label): put("alice",
    ...) stored the item under subject "a", out of reach of forget_subject("alice"), and
    forget_namespace("alice") answered a receipt that erased nothing. A filter that is not a
    dict raised a raw AttributeError, and list_namespaces(limit=-1) sliced from the end."""
    lg.put(("alice",), "k", {"text": "Alice plays chess"})
    for call in (
        lambda: lg.put("alice", "k2", {"text": "Alice plays go"}),
        lambda: lg.get("alice", "k"),
        lambda: lg.delete("alice", "k"),
        lambda: lg.search("alice"),
        lambda: lg.list_namespaces(prefix="alice"),
        lambda: lg.forget_namespace("alice"),
        lambda: lg.forget_key("alice", "k"),
    ):
        with pytest.raises(efface.InvalidInput, match="tuple of labels"):
            call()
    with pytest.raises(efface.InvalidInput, match="filter must be a dict"):
        lg.search(("alice",), filter="chess")
    for kwargs in ({"limit": -1}, {"offset": -1}, {"max_depth": -1}):
        with pytest.raises(efface.InvalidInput, match="0 or more"):
            lg.list_namespaces(**kwargs)
    with pytest.raises(efface.InvalidInput, match="0 or more"):
        lg.search(("alice",), limit=1.5)
    assert lg.list_namespaces() == [("alice",)] and list(lg.receipts) == []
    assert [m.key for m in store.scan(tenant="acme", purpose="memory", subject="a")] == []
    assert lg.get(("alice",), "k").value == {"text": "Alice plays chess"}


@pytest.mark.parametrize(
    "value", [{1: "x"}, {"a": {None: 1}}, {"a": [{True: 1}]}, {1: "a", "1": "b"}], ids=["int", "None", "bool", "both"]
)
def test_a_value_with_a_key_that_is_not_a_string_is_refused(lg, value):
    """InMemoryStore gives {1: "x"} back as put; the value's JSON text gave {"1": "x"} back
    (and {1: "a", "1": "b"} one key of two), silently: refused now, as metadata is."""
    with pytest.raises(efface.InvalidInput, match="keys must be strings"):
        lg.put(("a",), "k", value)
    assert lg.get(("a",), "k") is None


def test_a_value_nested_very_deep_is_refused_not_a_recursion_error(lg):
    deep: object = 1
    for _ in range(50_000):
        deep = {"a": deep}
    with pytest.raises(efface.InvalidInput, match="nested"):
        lg.put(("a",), "k", {"v": deep})


def test_a_misspelt_option_is_invalid_arguments_naming_what_is_taken(store):
    """EffaceStore(store, tenat=...) raised Python's bare TypeError: now efface.InvalidArguments
    (an InvalidInput, still a TypeError) naming the options it takes, never a value given."""
    for call in (lambda: EffaceStore(store, tenat="Alice Secret"), lambda: EffaceStore()):
        with pytest.raises(efface.InvalidArguments, match="store, tenant, subject, purpose, template") as err:
            call()
        assert isinstance(err.value, TypeError) and "Alice Secret" not in str(err.value)
    lg = EffaceStore(store, tenant="acme")
    with pytest.raises(efface.InvalidArguments, match="forget_subject"):
        lg.forget_subject("alice", tenat="acme")


def test_langmem_tools_on_the_efface_store(store):
    langmem = pytest.importorskip("langmem")
    lg_mem = EffaceStore(store, tenant="acme", template=("*", "subject"))
    manage = langmem.create_manage_memory_tool(namespace=("memories", "alice"), store=lg_mem)
    search = langmem.create_search_memory_tool(namespace=("memories", "alice"), store=lg_mem)
    out = manage.invoke({"content": "Alice prefers green tea in the morning", "action": "create"})
    mid = out.split()[-1]
    assert out == f"created memory {mid}" and uuid.UUID(mid)
    manage.invoke({"content": "Alice prefers oolong tea in the morning", "action": "update", "id": mid})
    found = json.loads(search.invoke({"query": "tea"}))
    assert [(f["key"], f["value"]) for f in found] == [(mid, {"content": "Alice prefers oolong tea in the morning"})]
    assert store.read(f"langgraph/memories.alice..{mid}", tenant="acme", purpose="memory").claims[0].subject == "alice"
    assert manage.invoke({"action": "delete", "id": mid}) == f"Deleted memory {mid}"
    assert json.loads(search.invoke({"query": "tea"})) == []
    receipt = lg_mem.last_receipt
    assert receipt.erased == (f"langgraph/memories.alice..{mid}",)
    assert store.wait(receipt.handle, timeout=30).erased and store.verify(receipt.handle).level == "erased"
