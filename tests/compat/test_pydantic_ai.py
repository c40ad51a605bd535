"""The Pydantic AI memory toolset on efface, driven by Pydantic AI's own ``FunctionModel``
(a model whose every turn is a Python function: no LLM): an agent remembers, recalls and
forgets, the forget tool's result is the receipt, and it reaches ``erased``.

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import efface

from peer_stores import require_framework

require_framework("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import ConversationConflict, InMemoryConversationStore  # noqa: E402
from pydantic_ai.exceptions import UserError  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from efface.compat._listing import scan_all  # noqa: E402
from efface.compat.pydantic_ai import EffaceConversationStore, EffaceToolset  # noqa: E402

from conftest import examples  # noqa: E402

HTTP_CONTRACT = True


@dataclass
class User:
    user_id: str


def _returns(messages: list[ModelMessage]) -> list:
    """Every part the tools sent back to the model so far (returns and retry prompts)."""
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, (ToolReturnPart, RetryPromptPart))
    ]


def scripted(*calls):
    """A FunctionModel turn function: the i-th turn makes the i-th tool call (args may be a
    function of the tool results so far), then ends the run with a text."""

    def turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = _returns(messages)
        if len(done) < len(calls):
            name, args = calls[len(done)]
            return ModelResponse(parts=[ToolCallPart(name, args(done) if callable(args) else args)])
        return ModelResponse(parts=[TextPart("done")])

    return turn


@pytest.fixture
def tools(store):
    return EffaceToolset(store, tenant="acme", subject=lambda ctx: ctx.deps.user_id)


def test_remember_recall_forget_through_an_agent(tools, store):
    assert isinstance(tools, FunctionToolset)
    model = FunctionModel(
        scripted(
            ("remember", {"text": "Alice keeps the spare key under the blue flowerpot"}),
            ("remember", {"text": "Alice's favourite tea is oolong"}),
            ("recall", {"query": "where is the spare key?"}),
            ("forget", lambda done: {"memory_id": done[0].content}),
            ("recall", {"query": "where is the spare key?"}),
        )
    )
    agent = Agent(model, deps_type=User, toolsets=[tools])
    result = agent.run_sync("Remember things, then forget where the key is", deps=User("alice"))
    assert result.output == "done"
    remembered, _tea, recalled, forgotten, again = _returns(result.all_messages())
    assert remembered.content.startswith("pydantic-ai/alice/")
    assert recalled.content[0]["id"] == remembered.content and "flowerpot" in recalled.content[0]["text"]
    receipt = forgotten.content  # the tool's result is the receipt itself
    assert receipt["level"] == "intent" and receipt["erased"] == [remembered.content]
    assert tools.last_receipt.handle == receipt["handle"]
    assert [m["text"] for m in again.content] == ["Alice's favourite tea is oolong"]
    assert store.wait(receipt["handle"], timeout=30).erased
    assert store.verify(receipt["handle"]).level == "erased"
    (mem,) = store.scan(tenant="acme", purpose="memory")
    assert [c.subject for c in mem.claims] == ["alice"]


def test_each_run_reaches_only_its_own_subject(tools, store):
    remember = Agent(FunctionModel(scripted(("remember", {"text": "Bob's locker code is 4711"}))), deps_type=User)
    bob_key = _returns(remember.run_sync("remember", deps=User("bob"), toolsets=[tools]).all_messages())[0].content
    thief = Agent(
        FunctionModel(
            scripted(
                ("recall", {"query": "locker code"}),
                ("forget", {"memory_id": bob_key}),  # another user's id: refused, the model is told to retry
                ("forget", {}),  # everything of *this* user: nothing of Bob's
            )
        ),
        deps_type=User,
        toolsets=[tools],
    )
    recalled, refused, everything = _returns(thief.run_sync("steal", deps=User("mallory")).all_messages())
    assert recalled.content == []
    # A ModelRetry: this version of Pydantic AI sends it back as a return marked 'retried'.
    assert refused.outcome == "retried" and "no memory of this user" in refused.content
    assert everything.content["erased"] == []
    assert store.read(bob_key, tenant="acme", purpose="memory").text == "Bob's locker code is 4711"
    assert len(tools.receipts) == 1


def test_bad_arguments_from_the_model_are_retried_not_raised(tools, store):
    model = FunctionModel(scripted(("remember", {"text": "   "}), ("recall", {"query": ""})))
    result = Agent(model, deps_type=User, toolsets=[tools]).run_sync("hi", deps=User("alice"))
    remembered, recalled = _returns(result.all_messages())
    assert remembered.outcome == "retried" and "text" in remembered.content
    assert recalled.outcome == "retried" and result.output == "done"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"k": -1}, "k must be"),  # dropped the best hit
        ({"k": 2000}, "k must be"),  # every recall failed, told to the model as a retry
        ({"tenant": ""}, "tenant"),
        ({"purpose": "customer support"}, "purpose"),
        ({"basis": "whim"}, "basis"),
        ({"subject": 5}, "subject"),
        ({"keep_receipts": -1}, "keep_receipts"),  # a raw ValueError from deque
    ],
)
def test_a_bad_toolset_option_is_refused_when_it_is_made(store, options, said):
    """The toolset's own options were checked only when a tool ran, and an InvalidInput there
    goes back to the model as a retry it cannot mend; now they are refused at construction."""
    kwargs = {"tenant": "acme", "subject": "carol", **options}
    with pytest.raises(efface.InvalidInput, match=said):
        EffaceToolset(store, **kwargs)


def test_forget_everything_of_the_subject(store):
    tools = EffaceToolset(store, tenant="acme", subject="carol", instructions=None)
    model = FunctionModel(
        scripted(
            ("remember", {"text": "Carol lives in Lisbon"}), ("remember", {"text": "Carol has a cat"}), ("forget", {})
        )
    )
    result = Agent(model, toolsets=[tools]).run_sync("remember, then forget me")
    receipt = _returns(result.all_messages())[-1].content
    assert len(receipt["erased"]) == 2 and receipt["selector"]["prefix"] == "pydantic-ai/carol/"
    assert store.wait(receipt["handle"], timeout=30).erased
    assert store.scan(tenant="acme", purpose="memory") == []


def test_the_model_sees_the_tools_and_instructions(tools):
    seen = {}

    def turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["tools"] = {t.name: t for t in info.function_tools}
        seen["instructions"] = info.instructions
        return ModelResponse(parts=[TextPart("ok")])

    Agent(FunctionModel(turn), deps_type=User, toolsets=[tools]).run_sync("hi", deps=User("alice"))
    assert set(seen["tools"]) == {"remember", "recall", "forget"}
    assert seen["tools"]["forget"].parameters_json_schema["properties"]["memory_id"]
    assert "receipt" in seen["tools"]["forget"].description
    assert "forget" in seen["instructions"]


# -- the ConversationStore -------------------------------------------------------------------
# Differential against Pydantic AI's own InMemoryConversationStore: the same random sequences
# of saves (new conversations, continued ones, rewritten histories), loads (with limits and
# scopes), branches, forks, deletes and listings on both, every result compared. Entry ids and
# revisions are minted per store, so histories are compared by their messages, and listings
# by their conversations (the order of two records saved in the same microsecond is free).

CIDS = st.sampled_from(["c1", "c2", "c/3"])
SCOPES = st.sampled_from([None, "alice", "bob"])
PICK = st.integers(0, 7)
"""Ops on a stored conversation name it by a number: the n-th stored one (in id order), or,
past them, one the store does not have, so most ops hit a conversation that exists."""
CONV_OPS = st.one_of(
    st.tuples(st.just("save"), CIDS, SCOPES, st.integers(1, 3)),
    st.tuples(st.just("continue"), PICK, st.sampled_from(["same", None, "other"]), st.integers(1, 2)),
    st.tuples(st.just("continue"), PICK, st.sampled_from(["same", None]), st.integers(1, 2)),
    st.tuples(st.just("rewrite"), PICK, st.integers(0, 5)),
    st.tuples(st.just("branch"), PICK, st.integers(0, 5)),
    st.tuples(st.just("fork"), PICK, st.one_of(st.none(), st.integers(0, 5)), st.sampled_from(["f1", "f2", "c1"])),
    st.tuples(st.just("delete"), PICK, st.sampled_from(["same", "same", None, "other"])),
    st.tuples(st.just("delete"), PICK, st.sampled_from(["same", None])),
    st.tuples(st.just("load"), PICK, st.one_of(st.none(), st.integers(0, 3)), st.sampled_from(["same", None, "other"])),
    st.tuples(st.just("list"), SCOPES),
)


def _pick(ref, n: int) -> str:
    stored = sorted(ref._records)
    return stored[n] if n < len(stored) else "never-saved"


def _scope(ref, cid: str, mode):
    """'same': the conversation's own scope; 'other': one it was not saved with; None."""
    record = ref._records.get(cid)
    own = record.scope if record is not None else None
    if mode == "same":
        return own
    return None if mode is None else ("bob" if own == "alice" else "alice")


class Script:
    def __init__(self):
        self.n = 0

    def messages(self, count: int) -> list:
        out = []
        for _ in range(count):
            self.n += 1
            if self.n % 2:
                out.append(ModelRequest(parts=[UserPromptPart(f"question {self.n}")]))
            else:
                out.append(ModelResponse(parts=[TextPart(f"answer {self.n}")]))
        return out


async def _both(ref, ours, call):
    """Run ``call(store)`` on both; both must raise the same Pydantic AI error or both return."""
    outcomes = []
    for s in (ref, ours):
        try:
            outcomes.append(("ok", await call(s)))
        except (ConversationConflict, UserError) as exc:
            outcomes.append(("raised", type(exc)))
    assert outcomes[0][0] == outcomes[1][0], outcomes
    if outcomes[0][0] == "raised":
        assert outcomes[0][1] is outcomes[1][1], outcomes
        return None, None
    return outcomes[0][1], outcomes[1][1]


def _msgs(conversation):
    return None if conversation is None else list(conversation.messages)


async def _conv_apply(ref, ours, script: Script, op) -> None:
    kind = op[0]
    if kind == "save":
        _, cid, scope, n = op
        msgs = script.messages(n)
        await _both(
            ref, ours, lambda s: s.save(Conversation(conversation_id=cid, messages=copy.deepcopy(msgs)), scope=scope)
        )
        return await _check(ref, ours)
    if kind == "list":

        def rows(records):
            return sorted((r.conversation_id, r.scope, r.forked_from, len(r.branches)) for r in records)

        assert rows(await ours.list_conversations(scope=op[1])) == rows(await ref.list_conversations(scope=op[1]))
        return await _check(ref, ours)
    cid = _pick(ref, op[1])
    if kind in ("continue", "rewrite"):
        loaded = [await ref.load(cid), await ours.load(cid)]
        assert _msgs(loaded[0]) == _msgs(loaded[1])
        if loaded[0] is None:
            return await _check(ref, ours)
        if kind == "continue":
            extra, scope = script.messages(op[3]), _scope(ref, cid, op[2])
            for c in loaded:
                c.messages.extend(copy.deepcopy(extra))
        else:
            scope = None
            at = op[2] % len(loaded[0].messages) if loaded[0].messages else 0
            new = script.messages(1)[-1]
            for c in loaded:
                c.messages[at:] = [copy.deepcopy(new)]
                c.new_message_index = None  # compare with the stored history: a rewrite branches
        it = iter(loaded)
        await _both(ref, ours, lambda s: s.save(next(it), scope=scope))
    elif kind == "branch":
        loaded = [await ref.load(cid), await ours.load(cid)]
        if loaded[0] is None:
            assert loaded[1] is None
            return await _check(ref, ours)
        at = min(op[2], len(loaded[0].messages))
        it = iter(loaded)
        got = await _both(ref, ours, lambda s: s.branch(cid, at=at, expected_revision=next(it).revision))
        assert _msgs(got[0]) == _msgs(got[1])
    elif kind == "fork":
        _, _, at, new_id = op
        got = await _both(ref, ours, lambda s: s.fork(cid, at=at, new_conversation_id=new_id))
        assert _msgs(got[0]) == _msgs(got[1])
    elif kind == "delete":
        scope = _scope(ref, cid, op[2])
        await ref.delete(cid, scope=scope)
        await ours.delete(cid, scope=scope)
    elif kind == "load":
        _, _, limit, mode = op
        scope = _scope(ref, cid, mode)
        assert _msgs(await ours.load(cid, limit=limit, scope=scope)) == _msgs(
            await ref.load(cid, limit=limit, scope=scope)
        )
    await _check(ref, ours)


async def _check(ref, ours) -> None:
    # After every op, every conversation loads the same, and the stored entries are those the
    # reference keeps (a delete releases exactly the entries no other conversation reaches).
    for cid in ["c1", "c2", "c/3", "f1", "f2"]:
        assert _msgs(await ours.load(cid)) == _msgs(await ref.load(cid))
    stored = scan_all(ours.store, tenant=ours.tenant, purpose=ours.purpose, prefix=ours.key_prefix + "e/")
    assert len(stored) == len(ref._entries)


START = [("save", "c1", None, 2), ("save", "c2", "alice", 3)]


@pytest.mark.slow  # on http and postgres a quarter of the examples unless EFFACE_SLOW=1 (conftest.examples)
def test_same_conversations_as_pydantic_ai_in_memory_store(store, backend):
    @settings(
        max_examples=examples(backend, 40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(ops=st.lists(CONV_OPS, min_size=1, max_size=12))
    # A fork shares the history it keeps: deleting the original keeps those entries, drops the rest;
    # a rewrite leaves a branch, whose entries stay while its conversation does.
    @example(ops=[("continue", 0, None, 2), ("fork", 0, 2, "f1"), ("delete", 0, "same"), ("delete", 1, "same")])
    @example(ops=[("rewrite", 0, 1), ("delete", 1, "same"), ("branch", 0, 1), ("delete", 0, None)])
    def same_conversations(ops):
        prefix = f"conv-{uuid.uuid4().hex[:8]}/"  # the store lives across examples
        ours = EffaceConversationStore(store, tenant="acme", subject="anyone", key_prefix=prefix)
        ref = InMemoryConversationStore()
        script = Script()

        async def main():
            # Two stored conversations to start from, so most random ops meet one.
            for op in [*START, *ops]:
                await _conv_apply(ref, ours, script, op)

        asyncio.run(main())

    same_conversations()


def test_an_agent_conversation_saved_then_deleted_reaches_erased(store):
    conversations = EffaceConversationStore(store, tenant="acme")
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("Noted, Alice.")])))

    async def chat():
        result = await agent.run("My locker code is 4711", conversation=Conversation(conversation_id="alice-1"))
        await conversations.save(result, scope="alice")
        again = await conversations.load("alice-1", scope="alice")
        result = await agent.run("What is my code?", conversation=again)
        await conversations.save(result)
        return await conversations.load("alice-1")

    loaded = asyncio.run(chat())
    assert len(loaded.messages) == 4 and loaded.messages[0].parts[0].content == "My locker code is 4711"
    assert {c.subject for m in store.scan(tenant="acme", purpose="conversation", limit=100) for c in m.claims} == {
        "alice"
    }
    asyncio.run(conversations.delete("alice-1"))
    receipts = conversations.last_deletion
    assert len(receipts) == 5  # the record, then its four entries
    assert asyncio.run(conversations.load("alice-1")) is None
    for r in receipts:
        assert store.wait(r.handle, timeout=30).erased
    assert store.verify(receipts[1].handle).level == "erased"
    assert store.scan(tenant="acme", purpose="conversation") == []
    with pytest.raises(efface.InvalidInput, match="subject"):
        asyncio.run(conversations.save(Conversation(conversation_id="nobody", messages=Script().messages(1))))
