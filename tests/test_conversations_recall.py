"""Conversation turns in recall (docs/conversations.md): a turn's time (``at``), speaker and
session are metadata checked at write; recall narrows by them (``after``, ``before``,
``said_by``) inside its live-claim resolution, and widens a hit to its session's neighbouring
turns (``window``), which are resolved like the hits. On every backend of the contract suite."""

from __future__ import annotations

import datetime as dt

import pytest

from efface.errors import InvalidInput

HTTP_CONTRACT = True

DAY = 86_400.0
MAY1 = dt.datetime(2018, 5, 1, tzinfo=dt.UTC).timestamp()


def _turn(store, key, text, who, session, at, *, tenant="pair", purpose="chat"):
    meta = {"speaker": who, "session": session, "at": at}
    store.write(key, text, tenant=tenant, subject=who, purpose=purpose, metadata=meta)


@pytest.fixture
def chat(store):
    """Two sessions between Alice and Bob, a day apart in May 2018, six turns each."""
    lines = [
        ("alice", "I went to a jazz concert in Lisbon"),
        ("bob", "Which band played the concert?"),
        ("alice", "A trio from Porto, the band was great"),
        ("bob", "I love a good band on a Friday"),
        ("alice", "We should see a band together"),
        ("bob", "Deal, next month then"),
    ]
    for s, session in enumerate(("s1", "s2")):
        for i, (who, text) in enumerate(lines):
            at = MAY1 + s * DAY + i * 60
            _turn(store, f"{session}-t{i}", f"{text} ({session})", who, session, at)
    return store


def keys(hits):
    return [h.key for h in hits]


def test_turn_fields_come_back_as_written(store):
    _turn(store, "k", "hello there", "alice", "s1", "2018-05-01T10:00:00+02:00")
    store.write(
        "d", "a dated note", tenant="pair", subject="alice", purpose="chat", metadata={"at": dt.date(2018, 5, 2)}
    )
    assert store.read("k", tenant="pair", purpose="chat").metadata == {
        "speaker": "alice",
        "session": "s1",
        "at": "2018-05-01T10:00:00+02:00",
    }
    assert store.read("d", tenant="pair", purpose="chat").metadata == {"at": "2018-05-02"}


@pytest.mark.parametrize(
    "meta",
    [
        {"at": "last tuesday"},
        {"at": True},
        {"at": float("inf")},
        {"at": [2018, 5, 1]},
        {"speaker": ""},
        {"speaker": 7},
        {"session": {"id": 1}},
        {"speaker": "x" * 300},
    ],
)
def test_bad_turn_fields_are_refused_at_write(store, meta):
    store.write("other", "text", tenant="pair", subject="alice", purpose="chat")
    with pytest.raises(InvalidInput):
        store.write("k", "text", tenant="pair", subject="alice", purpose="chat", metadata=meta)
    assert store.read("k", tenant="pair", purpose="chat") is None


@pytest.mark.parametrize(
    "options",
    [
        {"after": "soon"},
        {"before": [1]},
        {"said_by": ""},
        {"said_by": 3},
        {"window": -1},
        {"window": 51},
        {"window": True},
    ],
)
def test_bad_recall_filters_are_refused(chat, options):
    with pytest.raises(InvalidInput):
        chat.recall("band", tenant="pair", purpose="chat", **options)


def test_said_by_keeps_only_that_speakers_turns(chat):
    hits = chat.recall("band concert", tenant="pair", purpose="chat", said_by="bob", k=10)
    assert keys(hits) and all(h.metadata["speaker"] == "bob" for h in hits)
    assert len(hits) == 6  # every one of bob's turns, though only some share a word with the query


def test_after_and_before_bound_the_time(chat):
    second = chat.recall("band", tenant="pair", purpose="chat", after=MAY1 + DAY, k=10)
    assert sorted(keys(second)) == [f"s2-t{i}" for i in range(6)]
    first = chat.recall("band", tenant="pair", purpose="chat", before=dt.datetime(2018, 5, 2), k=10)
    assert sorted(keys(first)) == [f"s1-t{i}" for i in range(6)]
    # ISO dates and a range; an at without a zone is UTC
    one = chat.recall("band", tenant="pair", purpose="chat", after="2018-05-02", before="2018-05-02T00:02:30", k=10)
    assert sorted(keys(one)) == ["s2-t0", "s2-t1", "s2-t2"]
    both = chat.recall("band", tenant="pair", purpose="chat", said_by="alice", after="2018-05-02", k=10)
    assert sorted(keys(both)) == ["s2-t0", "s2-t2", "s2-t4"]


def test_a_filter_returns_k_when_k_match_however_far_down_the_indexes_rank_them(store):
    """300 turns of Bob's match the query's words; the 12 of Alice's do not. said_by='alice'
    must still give k of hers: the filter applies before the top-k cut, not after it."""
    store.write_many(
        [
            {"key": f"b{i}", "text": f"the weather report for harbour {i} says rain", "metadata": {"speaker": "bob"}}
            for i in range(300)
        ]
        + [
            {"key": f"a{i}", "text": f"my cat number {i} sleeps a lot", "metadata": {"speaker": "alice"}}
            for i in range(12)
        ],
        tenant="pair",
        subject="both",
        purpose="chat",
    )
    hits = store.recall("weather report harbour rain", tenant="pair", purpose="chat", said_by="alice", k=10)
    assert len(hits) == 10 and all(h.key.startswith("a") for h in hits)
    assert len(store.recall("weather", tenant="pair", purpose="chat", said_by="alice", k=50)) == 12
    assert store.recall("weather", tenant="pair", purpose="chat", said_by="carol", k=10) == []


def test_a_filter_never_serves_an_erased_or_other_purpose_record(chat):
    chat.forget(tenant="pair", key="s2-t1")
    _turn(chat, "x-t9", "bob saw a band in analytics", "bob", "s2", MAY1 + DAY + 30, purpose="analytics")
    hits = chat.recall("band", tenant="pair", purpose="chat", said_by="bob", after=MAY1 + DAY, k=10)
    assert sorted(keys(hits)) == ["s2-t3", "s2-t5"]


def test_a_window_gives_the_neighbouring_turns_of_the_session_in_time_order(chat):
    # written out of order: the window follows 'at', not the order of writing
    _turn(chat, "s1-early", "good morning", "bob", "s1", MAY1 - 60)
    (hit,) = chat.recall("jazz concert Lisbon", tenant="pair", purpose="chat", k=1, window=2)
    assert hit.key == "s1-t0"
    assert [t.key for t in hit.window] == ["s1-early", "s1-t1", "s1-t2"]
    assert hit.window[1].text == "Which band played the concert? (s1)"
    assert hit.window[1].metadata["speaker"] == "bob"
    (plain,) = chat.recall("jazz concert Lisbon", tenant="pair", purpose="chat", k=1)
    assert plain.window == ()


def test_a_window_never_holds_an_erased_other_purpose_other_tenant_or_filtered_turn(chat):
    chat.forget(tenant="pair", key="s1-t1")
    _turn(chat, "s1-other", "analytics only", "bob", "s1", MAY1 + 90, purpose="analytics")
    _turn(chat, "s1-elsewhere", "another tenant's turn", "bob", "s1", MAY1 + 100, tenant="other")
    (hit,) = chat.recall("jazz concert Lisbon", tenant="pair", purpose="chat", k=1, window=2)
    assert [t.key for t in hit.window] == ["s1-t2", "s1-t3"]
    (hit,) = chat.recall("jazz concert Lisbon", tenant="pair", purpose="chat", k=1, window=2, said_by="alice")
    assert [t.key for t in hit.window] == ["s1-t2", "s1-t4"]


def test_a_hit_without_a_session_has_no_window(store):
    store.write("n", "a note on jazz", tenant="pair", subject="alice", purpose="chat")
    (hit,) = store.recall("jazz", tenant="pair", purpose="chat", k=1, window=3)
    assert hit.key == "n" and hit.window == ()


def test_forget_erases_the_turn_fields_with_the_record(store):
    speaker = "Zebulon Quartermaine-Oyelaran"
    session = "session-7f3a9c1e-quartermaine"
    _turn(store, "stays", "another speaker's turn", "alice", "s0", "2018-05-01")  # the tenant outlives the forget
    _turn(store, "k", "a private remark", speaker, session, "2018-05-01T10:00:00")
    receipt = store.forget(tenant="pair", subject=speaker)
    assert store.recall("remark", tenant="pair", purpose="chat", said_by=speaker) == []
    store.wait(receipt.handle, timeout=30, tenant="pair")
    assert store.verify(receipt.handle, tenant="pair").level == "erased"


def test_the_mcp_recall_tool_filters_and_widens(tmp_path):
    pytest.importorskip("mcp", reason="the MCP server is the serve extra's")
    import asyncio

    from mcp import Client

    import efface
    from efface.service.mcp import build_mcp

    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        for i, who in enumerate(("alice", "bob", "alice")):
            meta = {"speaker": who, "session": "s1", "at": f"2018-05-01T10:0{i}:00"}
            store.write(f"t{i}", f"turn {i} about the band", tenant="acme", subject=who, purpose="chat", metadata=meta)

        async def call() -> dict:
            async with Client(build_mcp(store, tenant="acme", purpose="chat")) as client:
                result = await client.call_tool(
                    "recall", {"query": "band", "said_by": "bob", "after": "2018-05-01", "window": 1}
                )
                assert not result.is_error, result.content
                assert isinstance(result.structured_content, dict)
                return result.structured_content

        (hit,) = asyncio.run(call())["hits"]
    assert hit["key"] == "t1"
    assert hit["window"] == []  # its neighbours are alice's: the said_by filter applies to the window too
