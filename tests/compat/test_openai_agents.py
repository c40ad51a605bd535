"""The OpenAI Agents SDK session on efface: differential against the SDK's own SQLiteSession,
the SDK's Runner on it, and clears and pops that are real erasures.

The SDK ships no conformance suite for sessions, so the differential test is the contract:
the same random operation sequences run against ``SQLiteSession`` and ``EffaceSession`` and
every result is compared. There is no deliberate difference in what the four methods return;
the differences are what they leave behind (a receipt for every clear and pop, kept by the
session) and what they write (one efface record per item, with a claim).

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import efface

from peer_stores import require_framework

agents = require_framework("agents", "openai-agents", venv="openai-agents")

from agents import Agent, RunConfig, Runner, SQLiteSession  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory import SessionABC, SessionSettings  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from efface.compat.openai_agents import EffaceSession  # noqa: E402

HTTP_CONTRACT = True

SESSION_IDS = st.sampled_from(["conv", "a/b", "a", "a%2Fb"])
"""Ids that a naive key scheme would mix up: ``a``'s prefix is a prefix of ``a/b``'s, and
``a%2Fb`` is ``a/b`` percent-encoded."""
TEXTS = st.sampled_from(["hello", "Alice prefers green tea", "ünïcode ✓", "", "x" * 300])
ITEMS = st.one_of(
    st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant", "system"]), TEXTS),
    st.builds(
        lambda c, a: {"type": "function_call", "call_id": c, "name": "lookup", "arguments": a},
        st.sampled_from(["c1", "c2"]),
        st.sampled_from(['{"q": 1}', "{}"]),
    ),
    st.builds(lambda c, o: {"type": "function_call_output", "call_id": c, "output": o}, st.just("c1"), TEXTS),
)
LIMITS = st.sampled_from([None, -1, 0, 1, 2, 5])
OPS = st.one_of(
    st.tuples(st.just("add"), SESSION_IDS, st.lists(ITEMS, max_size=4)),
    st.tuples(st.just("add"), SESSION_IDS, st.lists(ITEMS, min_size=1, max_size=2)),
    st.tuples(st.just("get"), SESSION_IDS, LIMITS),
    st.tuples(st.just("pop"), SESSION_IDS),
    st.tuples(st.just("clear"), SESSION_IDS),
)


async def _apply(ref: SessionABC, ours: EffaceSession, op) -> None:
    kind = op[0]
    if kind == "add":
        await ref.add_items(op[2])
        await ours.add_items(op[2])
    elif kind == "get":
        assert await ours.get_items(op[2]) == await ref.get_items(op[2])
    elif kind == "pop":
        before = len(ours.receipts)
        got = await ours.pop_item()
        assert got == await ref.pop_item()
        # A pop that removed an item left its receipt; an empty session's pop forgot nothing.
        assert len(ours.receipts) == before + (got is not None)
        if got is not None:
            assert len(ours.last_receipt.erased) == 1
    elif kind == "clear":
        await ref.clear_session()
        n = len(await ours.get_items())
        await ours.clear_session()
        assert len(ours.last_receipt.erased) == n
    # Whatever the op, the whole conversation is the same.
    assert await ours.get_items() == await ref.get_items()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=20))
def test_same_results_as_the_sdk_sqlite_session(store, ops):
    run = uuid.uuid4().hex  # the store lives across examples; each example's sessions are new
    refs: dict[str, SQLiteSession] = {}
    ours: dict[str, EffaceSession] = {}

    async def main():
        for op in ops:
            sid = op[1]
            if sid not in refs:
                refs[sid] = SQLiteSession(sid)
                ours[sid] = EffaceSession(sid, store, tenant="acme", subject="alice", key_prefix=f"agents-{run}/")
            await _apply(refs[sid], ours[sid], op)

    try:
        asyncio.run(main())
    finally:
        for ref in refs.values():
            ref.close()


@pytest.fixture
def session(store):
    return EffaceSession("conv-1", store, tenant="acme", subject="alice")


def test_is_the_sdk_session_type(session):
    assert isinstance(session, SessionABC)
    assert session.session_id == "conv-1" and session.session_settings == SessionSettings()


def test_clear_session_is_a_forget_that_reaches_erased(session, store):
    items = [
        {"role": "user", "content": "Alice hides the key under the blue flowerpot"},
        {"role": "assistant", "content": "Noted."},
    ]
    asyncio.run(session.add_items(items))
    keys = [m.key for m in session._all()]
    assert len(keys) == 2 and all(k.startswith("agents/conv-1/") for k in keys)
    assert asyncio.run(session.clear_session()) is None  # the SDK's signature
    receipt = session.last_receipt
    assert sorted(receipt.erased) == keys
    assert asyncio.run(session.get_items()) == []
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.verify(receipt.handle).level == "erased"
    assert not store.recall("blue flowerpot", tenant="acme", purpose="conversation")


def test_pop_item_is_a_forget_and_numbers_are_not_reused(session, store):
    asyncio.run(session.add_items([{"role": "user", "content": "first"}, {"role": "user", "content": "second"}]))
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "second"}
    popped = session.last_receipt
    (popped_key,) = popped.erased
    asyncio.run(session.add_items([{"role": "user", "content": "third"}]))
    keys = [m.key for m in session._all()]
    assert popped_key not in keys and keys == sorted(keys)
    assert asyncio.run(session.get_items()) == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "third"},
    ]
    assert store.wait(popped.handle, timeout=30).erased
    assert store.verify(popped.handle).level == "erased"
    assert asyncio.run(EffaceSession("empty", store, tenant="acme", subject="alice").pop_item()) is None


def test_sessions_of_one_subject_go_with_forget_subject(store):
    alice_1 = EffaceSession("a1", store, tenant="acme", subject="alice")
    alice_2 = EffaceSession("a2", store, tenant="acme", subject="alice")
    bob = EffaceSession("b1", store, tenant="acme", subject="bob")
    for s in (alice_1, alice_2, bob):
        asyncio.run(s.add_items([{"role": "user", "content": f"hello from {s.session_id}"}]))
    receipt = alice_2.forget_subject()
    assert len(receipt.erased) == 2 and alice_2.last_receipt is receipt
    assert asyncio.run(alice_1.get_items()) == [] and asyncio.run(alice_2.get_items()) == []
    assert asyncio.run(bob.get_items()) == [{"role": "user", "content": "hello from b1"}]
    assert [c.subject for c in bob._all()[0].claims] == ["bob"]


def test_limit_from_settings_and_a_session_made_again(store):
    s = EffaceSession("c", store, tenant="acme", subject="alice", session_settings=SessionSettings(limit=2))
    asyncio.run(s.add_items([{"role": "user", "content": str(i)} for i in range(5)]))
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["3", "4"]
    assert [i["content"] for i in asyncio.run(s.get_items(limit=3))] == ["2", "3", "4"]
    again = EffaceSession("c", store, tenant="acme", subject="alice")
    asyncio.run(again.add_items([{"role": "user", "content": "5"}]))
    assert [i["content"] for i in asyncio.run(again.get_items())] == ["0", "1", "2", "3", "4", "5"]


def test_bad_items_are_refused_and_nothing_is_written(session):
    asyncio.run(session.add_items([{"role": "user", "content": "kept"}]))
    with pytest.raises(efface.InvalidInput, match="JSON"):
        asyncio.run(session.add_items([{"role": "user", "content": "fine"}, {"bad": object()}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "kept"}]
    with pytest.raises(efface.InvalidInput):
        EffaceSession("", object(), tenant="acme", subject="alice")


class EchoModel(Model):
    """A model for the SDK's Runner that calls no LLM: it answers with how many input items it
    was given, so the test sees the history the Runner read from the session."""

    def __init__(self) -> None:
        self.inputs: list = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                           **kw):  # fmt: skip
        self.inputs.append(input)
        text = f"seen {len(input) if isinstance(input, list) else 1} items"
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kw):
        raise NotImplementedError


def test_the_sdk_runner_keeps_its_conversation_in_efface(session, store):
    model = EchoModel()
    agent = Agent(name="assistant", instructions="Be brief.", model=model)
    config = RunConfig(tracing_disabled=True)
    first = asyncio.run(Runner.run(agent, "My name is Alice", session=session, run_config=config))
    assert first.final_output == "seen 1 items"
    second = asyncio.run(Runner.run(agent, "What is my name?", session=session, run_config=config))
    assert second.final_output == "seen 3 items"  # the Runner read the first turn back from efface
    history = asyncio.run(session.get_items())
    assert [i.get("role") for i in history] == ["user", "assistant", "user", "assistant"]
    assert history[0]["content"] == "My name is Alice"
    assert store.recall("Alice", tenant="acme", purpose="conversation")
    asyncio.run(session.clear_session())
    assert store.wait(session.last_receipt.handle, timeout=30).erased
    third = asyncio.run(Runner.run(agent, "Who am I?", session=session, run_config=config))
    assert third.final_output == "seen 1 items"
