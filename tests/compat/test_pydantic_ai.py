"""The Pydantic AI memory toolset on efface, driven by Pydantic AI's own ``FunctionModel``
(a model whose every turn is a Python function: no LLM): an agent remembers, recalls and
forgets, the forget tool's result is the receipt, and it reaches ``erased``.

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from peer_stores import require_framework

require_framework("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from efface.compat.pydantic_ai import EffaceToolset  # noqa: E402

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
