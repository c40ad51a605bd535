"""The gate proxy in process, on a fake clock: scopes from a mapping file, an upstream whose
reads lag behind its deletes, a delete that fails upstream, a delete that names nothing, and
a restart; and efface's own MCP server behind it, whose receipt is the evidence. The upstream
is a small notes server on the SDK's ``MCPServer`` (or ``build_mcp``); the proxy's own
``Server`` is reached through the SDK's ``Client``, in memory."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from efface.gate.proxy import GateProxy

MAPPING = {
    "tools": {
        "save_note": {"kind": "write", "scope": "user"},
        "search_notes": {"kind": "read", "scope": "user"},
        "delete_note": {"kind": "delete", "scope": "user"},
        "broken_delete": {"kind": "delete", "scope": "user"},
    }
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Notes:
    """The upstream: notes per user, and ``ghosts`` that reads still serve after a delete (a lag)."""

    def __init__(self) -> None:
        self.notes: dict[str, dict[str, str]] = {}
        self.ghosts: dict[str, dict[str, str]] = {}
        self.server = MCPServer("notes")

        @self.server.tool()
        def save_note(user: str, title: str, text: str) -> dict:
            self.notes.setdefault(user, {})[title] = text
            return {"saved": True}

        @self.server.tool()
        def search_notes(user: str, query: str) -> dict:
            seen = {**self.notes.get(user, {}), **self.ghosts.get(user, {})}
            return {"notes": [{"title": t, "text": x} for t, x in seen.items() if query in t or query in x]}

        @self.server.tool()
        def list_all() -> dict:
            every = [(u, t) for src in (self.notes, self.ghosts) for u, n in src.items() for t in n]
            return {"titles": sorted({t for _, t in every})}

        @self.server.tool()
        def delete_note(user: str, titles: list[str]) -> dict:
            for t in titles:
                self.notes.get(user, {}).pop(t, None)
            return {"deleted": True}

        @self.server.tool()
        def broken_delete(user: str, titles: list[str]) -> dict:
            raise ValueError("upstream failure")

        @self.server.tool()
        def clear_all() -> str:
            self.notes.clear()
            return "cleared"


async def call(agent: Client, name: str, args: dict[str, Any]) -> tuple[bool, dict]:
    result = await agent.call_tool(name, args)
    if result.is_error:
        return False, json.loads(result.content[0].text)["error"]
    if result.structured_content is not None:
        return True, result.structured_content
    # The notes server answers in text only; the gate's object is then the last text block.
    docs = [json.loads(c.text) for c in result.content]
    return True, {k: v for doc in docs if isinstance(doc, dict) for k, v in doc.items()}


def with_proxy(tmp_path, notes: Notes, clock: Clock, body, mapping=MAPPING):
    async def main():
        async with Client(notes.server, cache=None) as upstream:
            proxy = GateProxy(upstream, str(tmp_path / "gate.db"), settle_s=10, mapping=mapping["tools"], clock=clock)
            try:
                await proxy.load_tools()
                async with Client(proxy.server) as agent:
                    return await body(agent)
            finally:
                proxy.close()

    return asyncio.run(main())


@pytest.fixture
def notes() -> Notes:
    n = Notes()
    n.notes = {"alice": {"tea": "green tea at four"}, "bob": {"chess": "plays on Sundays"}}
    return n


def test_a_scoped_delete_refuses_its_scope_and_unscoped_reads_only(tmp_path, notes):
    clock = Clock()

    async def body(agent: Client):
        ok, answer = await call(agent, "delete_note", {"user": "alice", "titles": ["tea"]})
        assert ok and answer["deleted"] is True
        handle = answer["efface_gate"]["handle"]
        notes.ghosts = {"alice": {"tea": "green tea at four"}}  # reads lag behind the delete
        ok, error = await call(agent, "search_notes", {"user": "alice", "query": "tea"})
        assert not ok and error["type"] == "ErasureNotSettled" and error["retry_after"]
        assert "alice" not in error["message"] and "tea" not in error["message"]
        assert (await call(agent, "search_notes", {"user": "bob", "query": "chess"}))[0]  # another scope
        assert not (await call(agent, "list_all", {}))[0]  # spans every scope
        ok, missing = await call(agent, "delete_note", {"titles": ["chess"]})
        assert not ok and missing["type"] == "InvalidInput"

        clock.now += 11
        ok, error = await call(agent, "search_notes", {"user": "alice", "query": "four"})
        assert not ok and "sentinel probe" in error["message"] and error["retry_after"] is None
        checked = (await call(agent, "verify_erasure", {"handle": handle}))[1]
        assert checked["level"] == "intent" and "not clean" in checked["checked"][0]

        notes.ghosts = {}
        checked = (await call(agent, "verify_erasure", {"handle": handle}))[1]
        assert (checked["level"], checked["settled_by"], checked["reads"]) == ("unreadable", "probe", "allowed")
        again = (await call(agent, "verify_erasure", {"handle": handle}))[1]
        assert again["checked"][0].startswith("already settled")
        assert (await call(agent, "search_notes", {"user": "alice", "query": "tea"}))[1] == {"notes": []}
        assert (await call(agent, "list_all", {}))[1] == {"titles": ["chess"]}

    with_proxy(tmp_path, notes, clock, body)


def test_a_delete_that_fails_upstream_still_holds_its_scope(tmp_path, notes):
    clock = Clock()

    async def body(agent: Client):
        result = await agent.call_tool("broken_delete", {"user": "alice", "titles": ["tea"]})
        assert result.is_error
        gate = json.loads(result.content[-1].text)["efface_gate"]
        assert gate["handle"] is None and "error" in gate["note"]
        assert not (await call(agent, "search_notes", {"user": "alice", "query": "x"}))[0]
        clock.now += 11
        # The upstream did not delete: the probes find the note, so the scope stays closed.
        ok, error = await call(agent, "search_notes", {"user": "alice", "query": "x"})
        assert not ok and "sentinel probe" in error["message"]

    with_proxy(tmp_path, notes, clock, body)


def test_a_delete_that_names_nothing_waits_for_an_empty_answer(tmp_path, notes):
    clock = Clock()

    async def body(agent: Client):
        result = await agent.call_tool("clear_all", {})
        assert not result.is_error and json.loads(result.content[-1].text)["efface_gate"]["level"] == "intent"
        assert (await agent.call_tool("forget_status", {"handle": "gph_unknown"})).is_error
        clock.now += 11
        notes.ghosts = {"bob": {"chess": "plays"}}
        assert not (await call(agent, "list_all", {}))[0]  # anything at all may be what was cleared
        notes.ghosts = {}
        assert (await call(agent, "list_all", {}))[1] == {"titles": []}

    with_proxy(tmp_path, notes, clock, body)


def test_after_a_restart_a_scope_known_only_by_its_hash_blocks_unscoped_reads(tmp_path, notes):
    clock = Clock()

    async def delete(agent: Client):
        return (await call(agent, "delete_note", {"user": "alice", "titles": ["tea"]}))[1]["efface_gate"]["handle"]

    handle = with_proxy(tmp_path, notes, clock, delete)
    clock.now += 11

    async def restarted(agent: Client):
        ok, error = await call(agent, "list_all", {})
        assert not ok and "only by its hash" in error["message"]
        status = (await call(agent, "verify_erasure", {"handle": handle}))[1]
        assert status["level"] == "intent" and status["checked"][0].startswith("cannot_verify")
        # A read naming the scope runs its probes (the read itself: the targets were the first process's).
        assert (await call(agent, "search_notes", {"user": "alice", "query": "tea"}))[1] == {"notes": []}
        assert (await call(agent, "list_all", {}))[0]
        return (await call(agent, "forget_status", {"handle": handle}))[1]

    assert with_proxy(tmp_path, notes, clock, restarted)["level"] == "unreadable"


def test_the_listing_marks_kinds_and_adds_the_gate_tools(tmp_path, notes):
    async def body(agent: Client):
        tools = {t.name: t for t in (await agent.list_tools()).tools}
        assert "intent, not proof" in tools["delete_note"].description
        assert "refused" in tools["search_notes"].description
        assert "refused" not in (tools["save_note"].description or "")
        assert tools["forget_status"].annotations.read_only_hint is True
        assert {"forget_status", "verify_erasure"} <= set(tools)

    with_proxy(tmp_path, notes, Clock(), body)


def test_in_front_of_efface_the_receipt_is_the_evidence(tmp_path, store):
    from efface.service.mcp import build_mcp

    clock = Clock()

    async def main():
        async with Client(build_mcp(store, tenant="acme", purpose="support"), cache=None) as upstream:
            proxy = GateProxy(upstream, str(tmp_path / "gate.db"), settle_s=10, clock=clock)
            try:
                await proxy.load_tools()
                async with Client(proxy.server) as agent:
                    tools = {t.name for t in (await agent.list_tools()).tools}
                    assert "erasure_status" in tools and "verify_erasure" in tools  # efface's own is hidden
                    await call(agent, "remember", {"key": "alice/tea", "text": "Alice prefers tea", "subject": "alice"})
                    ok, receipt = await call(agent, "forget", {"subject": "alice"})
                    assert ok and receipt["level"] == "intent" and receipt["erased"] == ["alice/tea"]
                    handle = receipt["efface_gate"]["handle"]
                    assert not (await call(agent, "recall", {"query": "tea"}))[0]
                    status = (await call(agent, "forget_status", {"handle": handle}))[1]
                    assert status["upstream_handle"] == receipt["handle"] and status["level"] == "intent"
                    verified = (await call(agent, "verify_erasure", {"handle": handle}))[1]
                    assert verified["level"] == verified["upstream"]["level"] != "intent"
                    assert verified["settled_by"] == "verified" and verified["reads"] == "allowed"
                    assert (await call(agent, "recall", {"query": "tea"}))[1]["hits"] == []
            finally:
                proxy.close()

    asyncio.run(main())


def test_a_failure_inside_the_proxy_is_answered_without_its_details(tmp_path, notes, monkeypatch, caplog):
    from efface.gate import upstream

    def broken(*_a, **_k):
        raise KeyError("zq-secret")

    monkeypatch.setattr("efface.gate.proxy.targets", broken)
    assert upstream.targets is not broken

    async def body(agent: Client):
        result = await agent.call_tool("delete_note", {"user": "alice", "titles": ["zq-secret"]})
        assert result.is_error and "InternalError" in result.content[0].text and "zq" not in result.content[0].text

    with_proxy(tmp_path, notes, Clock(), body)
    assert "KeyError" in caplog.text and "zq" not in caplog.text
