"""The MCP server through the SDK's own client: in memory, over stdio (``python -m efface mcp``
spawned by the test) and over streamable HTTP (a server the test starts on a free loopback
port, API keys from a real KeyRing).

Servers the tests start must start; outside CI a server that cannot start skips its tests
with the reason, under ``CI=true`` it fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jsonschema
import pytest
import uvicorn
from fastapi import FastAPI
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

import efface
from efface.errors import InvalidInput
from efface.service.keys import KeyRing, key_path
from efface.service.mcp import build_mcp, mcp_http_app

SRC = Path(__file__).resolve().parents[2] / "src"
LEVELS = ["intent", "unreadable", "erased"]
TOOLS = {
    "remember",
    "register_subject",
    "read",
    "recall",
    "forget",
    "erasure_status",
    "wait_erasure",
    "verify_erasure",
}


def run(coro_fn, *args):
    return asyncio.run(coro_fn(*args))


# -- helpers on a connected client ----------------------------------------------------------
async def tools_of(client: Client) -> dict[str, Any]:
    return {t.name: t for t in (await client.list_tools()).tools}


async def ok(client: Client, name: str, args: dict[str, Any], schemas: dict[str, Any] | None = None) -> dict:
    """Call a tool that must succeed; its structured result, checked against its output schema."""
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    if schemas is not None:
        jsonschema.validate(result.structured_content, schemas[name].output_schema)
    return result.structured_content


def error_of(result: CallToolResult) -> dict:
    """The efface error a failed tool call carries: {"type": ..., "message": ...}."""
    assert result.is_error
    (block,) = result.content
    assert "Traceback" not in block.text
    return json.loads(block.text)["error"]


async def erase_and_prove(client: Client, *, purpose: str | None = None) -> str:
    """What every transport must do: list the tools, write, recall, forget with a structured
    receipt, then status / wait / verify up to 'erased'. Returns the handle."""
    tools = await tools_of(client)
    assert set(tools) == TOOLS
    assert tools["recall"].annotations.read_only_hint is True
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["forget"].annotations.idempotent_hint is True
    with_purpose = {} if purpose is None else {"purpose": purpose}
    wrote = await ok(
        client,
        "remember",
        {"key": "alice/tea", "text": "Alice prefers green tea", "subject": "alice", **with_purpose},
        tools,
    )
    assert wrote["key"] == "alice/tea" and wrote["epoch"] >= 1
    hits = (await ok(client, "recall", {"query": "green tea", **with_purpose}, tools))["hits"]
    assert [h["key"] for h in hits] == ["alice/tea"]
    assert hits[0]["text"] == "Alice prefers green tea"

    receipt = await ok(client, "forget", {"subject": "alice"}, tools)
    assert receipt["level"] == "intent"
    assert receipt["erased"] == ["alice/tea"]
    assert receipt["retained"] == [] and receipt["quarantined"] == []
    assert {"origin", "fts", "ann"} <= set(receipt["paths"])
    assert "not evidence" in receipt["level_means"]
    assert (await ok(client, "recall", {"query": "green tea", **with_purpose}, tools))["hits"] == []

    handle = receipt["handle"]
    # every copy's state: nothing checked at acknowledgement, so nothing claimed
    assert receipt["copies"] and {c["state"] for c in receipt["copies"].values()} == {"pending"}
    status = await ok(client, "erasure_status", {"handle": handle}, tools)
    assert status["handle"] == handle and status["level"] == "intent"
    assert set(status["copies"]) == set(receipt["copies"])
    assert {c["state"] for c in status["copies"].values()} <= {"pending", "unchecked"}
    waited = await ok(client, "wait_erasure", {"handle": handle, "timeout_s": 120}, tools)
    assert waited["erased"] is True and waited["settled"] is True
    assert {c["state"] for c in waited["copies"].values()} == {"unchecked"}
    verified = await ok(client, "verify_erasure", {"handle": handle}, tools)
    assert verified["level"] == "erased" and verified["failed"] == []
    assert verified["receipt_level"] == "erased"
    assert {c["state"] for c in verified["copies"].values()} <= {"erased", "shredded"}
    final = await ok(client, "erasure_status", {"handle": handle}, tools)
    assert final["level"] == "erased" and final["copies"] == verified["copies"]
    return handle


# -- in memory -----------------------------------------------------------------------------
def test_tools_declare_their_hints_and_output_schemas(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return await tools_of(client)

    tools = run(body)
    assert set(tools) == TOOLS
    for name in ("read", "recall", "erasure_status", "wait_erasure"):
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("remember", "register_subject", "forget", "verify_erasure"):
        assert not tools[name].annotations.read_only_hint, name
    forget = tools["forget"]
    assert (forget.annotations.destructive_hint, forget.annotations.idempotent_hint) == (True, True)
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        # The tenant is never the agent's to name.
        assert "tenant" not in tool.input_schema.get("properties", {}), tool.name
    receipt = forget.output_schema
    assert {"handle", "epoch", "level", "erased", "retained", "quarantined", "paths"} <= set(receipt["required"])
    assert receipt["properties"]["level"]["enum"] == LEVELS
    retained = receipt["$defs"]["RetainedOut"]
    assert {"key", "purpose", "basis", "expires_at", "reason"} <= set(retained["required"])
    # The description says what each rung proves, so intent is not taken for evidence.
    for name in ("forget", "erasure_status", "wait_erasure", "verify_erasure"):
        for words in ("intent:", "unreadable:", "erased:", "not evidence", "verify_erasure"):
            assert words in tools[name].description, (name, words)


def test_write_recall_forget_and_prove_in_memory(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return await erase_and_prove(client)

    handle = run(body)
    # The tools acted on the library's store, in the configured tenant.
    assert store.status(handle, tenant="acme").level == "erased"


def test_read_register_subject_and_retained_claims(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            tools = await tools_of(client)
            await ok(client, "register_subject", {"subject": "alice", "identifiers": ["Alice Martin"]}, tools)
            await ok(
                client,
                "remember",
                {
                    "key": "inv/1",
                    "text": "Invoice 2024-001, twelve euros",
                    "subject": "alice",
                    "purpose": "billing",
                    "basis": "legal_obligation",
                    "metadata": {"amount": 12},
                },
                tools,
            )
            await ok(client, "remember", {"key": "digest", "text": "Alice Martin asked about tea", "subject": "ops"})
            read = await ok(client, "read", {"key": "inv/1", "purpose": "billing"}, tools)
            assert read["found"] is True and read["memory"]["metadata"] == {"amount": 12}
            assert read["memory"]["claims"][0]["basis"] == "legal_obligation"
            missing = await ok(client, "read", {"key": "inv/1"}, tools)  # the default purpose: support
            assert missing == {"found": False, "memory": None}
            receipt = await ok(client, "forget", {"subject": "alice"}, tools)
            # The legal claim outranks the request: kept, and the receipt says why.
            assert [r["key"] for r in receipt["retained"]] == ["inv/1"]
            assert receipt["retained"][0]["reason"]
            assert receipt["quarantined"] == ["digest"]

    run(body)


def test_library_errors_come_back_as_typed_tool_errors(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            await ok(client, "remember", {"key": "alice-secret-key", "text": "Alice's secret", "subject": "alice"})
            out = {
                "scope": error_of(await client.call_tool("forget", {})),
                "purpose": error_of(await client.call_tool("read", {"key": "alice-secret-key", "purpose": "nope"})),
                "handle": error_of(await client.call_tool("verify_erasure", {"handle": "efr_alice"})),
                "basis": error_of(
                    await client.call_tool("remember", {"key": "k", "text": "t", "subject": "s", "basis": "whim"})
                ),
            }
            return out

    errors = run(body)
    assert errors["scope"]["type"] == "ScopeError"
    assert errors["purpose"]["type"] == "UnknownPurpose"
    assert errors["handle"]["type"] == "NotFound"
    assert errors["basis"]["type"] == "UnknownBasis"
    for error in errors.values():
        assert error["message"]
        assert "alice" not in error["message"].lower() and "nope" not in error["message"]


def test_arguments_outside_the_schema_are_refused_without_echoing_them(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return await client.call_tool(
                "remember", {"key": "k", "text": "t", "subject": "s", "ttl_s": "alice-secret-ttl"}
            )

    result = run(body)
    assert result.is_error
    (block,) = result.content
    assert "ttl_s" in block.text and "alice-secret-ttl" not in block.text


def test_arguments_outside_the_schema_come_back_in_effaces_error_shape(store):
    """Every other refusal is {"error": {"type", "message"}}; arguments that did not fit the
    schema came back as the SDK's text ("Error executing tool remember: 1 validation error
    for rememberArguments ..."), which an agent parsing efface's shape could not read."""
    calls = [
        ("remember", {"key": "k", "text": "t", "subject": "s", "ttl_s": "alice-secret-ttl"}, "ttl_s"),
        ("remember", {"text": "alice-secret-text"}, "key: Field required; subject: Field required"),
        ("remember", {"key": "k", "text": "t", "subject": "s", "sources": ["a", 5]}, "sources[1]"),
        ("recall", {"query": "alice-secret-query", "k": 5000}, "k: Input should be less than or equal to 1000"),
        ("wait_erasure", {"handle": "h", "until": "alice-secret-until"}, "until"),
        # an argument the tool does not take was dropped: a misnamed ttl kept the memory for ever,
        # a tenant named another than the server's wrote in the server's, without a word
        ("remember", {"key": "k", "text": "t", "subject": "s", "ttl": 60}, "an argument this tool does not take"),
        ("remember", {"key": "k", "text": "t", "subject": "s", "tenant": "globex"}, "does not take"),
        ("forget", {"subject": "s", "alice-secret-name": True}, "does not take"),
    ]

    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return [await client.call_tool(name, args) for name, args, _ in calls]

    for (_name, _args, says), result in zip(calls, run(body), strict=True):
        error = error_of(result)
        assert error["type"] == "InvalidInput" and says in error["message"], error
        assert "alice-secret" not in error["message"]
    assert store.stats()["records"] == 0  # nothing was written


def test_an_unknown_tool_is_answered_in_effaces_shape_without_its_name(store):
    """Over stdio (and in memory) the SDK answered "Unknown tool: <the name asked for>"; only
    over HTTP did the guard hide the name. Now every transport gets efface's NotFound."""

    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return await client.call_tool("forget_alice-secret", {"subject": "alice-secret"})

    error = error_of(run(body))
    assert error["type"] == "NotFound" and "tools/list" in error["message"]
    assert "alice-secret" not in error["message"]


def test_an_unexpected_failure_is_answered_without_its_details(store, monkeypatch, caplog):
    def broken(*_a, **_k):
        raise RuntimeError("alice's secret text")

    monkeypatch.setattr(store, "recall", broken)

    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            return await client.call_tool("recall", {"query": "tea"})

    error = error_of(run(body))
    assert error["type"] == "InternalError"
    assert "secret" not in error["message"]
    assert "RuntimeError" in caplog.text and "secret" not in caplog.text


def test_without_a_default_purpose_the_agent_must_name_one(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme")) as client:
            missing = await client.call_tool("remember", {"key": "k", "text": "tea", "subject": "alice"})
            named = await client.call_tool("remember", {"key": "k", "text": "tea", "subject": "alice", "purpose": "p"})
            return missing, named

    missing, named = run(body)
    assert error_of(missing)["type"] == "InvalidInput" and "--purpose" in error_of(missing)["message"]
    assert not named.is_error


def test_a_configured_tenant_sees_only_its_own(store):
    async def body():
        async with (
            Client(build_mcp(store, tenant="acme", purpose="support")) as acme,
            Client(build_mcp(store, tenant="globex", purpose="support")) as globex,
        ):
            await ok(acme, "remember", {"key": "alice/tea", "text": "Alice prefers green tea", "subject": "alice"})
            await ok(globex, "remember", {"key": "own", "text": "globex notes on coffee", "subject": "carol"})
            hits = (await ok(globex, "recall", {"query": "Alice green tea"}))["hits"]
            read = await ok(globex, "read", {"key": "alice/tea"})
            receipt = await ok(globex, "forget", {"subject": "alice"})
            status = await globex.call_tool("erasure_status", {"handle": receipt["handle"]})
            still = await ok(acme, "read", {"key": "alice/tea"})
            return hits, read, receipt, status, still

    hits, read, receipt, status, still = run(body)
    assert [h["key"] for h in hits] == ["own"]
    assert read["found"] is False
    assert receipt["erased"] == [] and receipt["released"] == []
    assert not status.is_error  # its own receipt
    assert still["found"] is True


def test_build_mcp_needs_exactly_one_source_of_tenant(store, tmp_path):
    with pytest.raises(InvalidInput):
        build_mcp(store)
    with KeyRing(tmp_path / "keys.db") as ring, pytest.raises(InvalidInput):
        build_mcp(store, tenant="acme", ring=ring)
    with pytest.raises(InvalidInput):
        build_mcp(store, tenant=" ")


# -- servers the tests start ----------------------------------------------------------------
def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *([path] if path else [])])}


def _cannot_start(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the test's server did not start ({why}), and CI must run these tests")
    pytest.skip(f"the test's server did not start: {why}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _efface_mcp(store_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "efface", "mcp", "--store", str(store_dir), "--embedder", "hashing", *args]


def test_stdio_through_the_sdk_client(tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=_efface_mcp(tmp_path / "store", "--tenant", "acme", "--purpose", "support")[1:],
        env=_env(),
    )

    async def body():
        async with Client(params) as client:
            return await erase_and_prove(client)

    try:
        handle = run(body)
    except (OSError, ConnectionError) as exc:  # the subprocess could not be spawned or spoke no MCP
        _cannot_start(f"{type(exc).__name__}: {exc}")
    with efface.open(tmp_path / "store", embedder="hashing", background=False) as s:
        assert s.status(handle, tenant="acme").level == "erased"


def test_stdio_writes_nothing_but_protocol_to_stdout_and_no_data_to_stderr(tmp_path):
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "remember", "arguments": {"key": "zq-key", "text": "zq secret text", "subject": "zq"}},
        },
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "forget", "arguments": {}}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "forget", "arguments": {"key": "zq-key"}},
        },
    ]
    # The configuration from the environment this time: store, tenant and default purpose.
    env = {**_env(), "EFFACE_STORE": str(tmp_path / "store"), "EFFACE_TENANT": "globex", "EFFACE_PURPOSE": "support"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "efface", "mcp", "--embedder", "hashing"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    out: list[dict] = []
    assert proc.stdin is not None and proc.stdout is not None
    for message in lines:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" in message:  # one answer per request, in order: wait for it before sending the next
            line = proc.stdout.readline()
            if not line:
                _cannot_start(f"no answer to {message['method']}: {proc.communicate()[1][-500:]}")
            out.append(json.loads(line))  # every line on stdout is one JSON-RPC message
    rest, err = proc.communicate(timeout=120)  # closing stdin ends the session, and the server
    assert proc.returncode == 0, err
    assert [json.loads(line) for line in rest.splitlines() if line.strip()] == []
    assert all(m["jsonrpc"] == "2.0" for m in out)
    assert [m["id"] for m in out] == [1, 2, 3, 4]
    assert out[2]["result"]["isError"] is True
    assert out[3]["result"]["structuredContent"]["erased"] == ["zq-key"]
    assert "zq" not in err
    with efface.open(tmp_path / "store", embedder="hashing", background=False) as s:
        assert len(s.receipts("globex")) == 1 and s.receipts("default") == []


# -- streamable HTTP -----------------------------------------------------------------------
class HttpServer:
    """``efface mcp --transport http`` on a free loopback port, and the key ring beside it."""

    def __init__(self, store_dir: Path):
        self.store_dir = store_dir
        store_dir.mkdir()
        self.ring = KeyRing(key_path(store_dir))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            _efface_mcp(store_dir, "--transport", "http", "--port", str(self.port), "--purpose", "support"),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self, deadline_s: float = 120.0) -> str | None:
        """None once the port accepts connections; else why not."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return f"exited {self.proc.returncode}: {self.proc.communicate()[1][-500:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return None
            except OSError:
                time.sleep(0.05)
        return f"port {self.port} not open after {deadline_s:.0f} s"

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.ring.close()
        return err


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    server = HttpServer(tmp_path_factory.mktemp("mcp-http") / "store")
    why = server.wait_ready()
    if why is not None:
        server.stop()
        _cannot_start(why)
    yield server
    err = server.stop()
    assert server.proc.returncode == 0, err


@contextlib.asynccontextmanager
async def http_client(url: str, key: str | None):
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def test_http_through_the_sdk_client(http_server):
    key, _ = http_server.ring.create("acme")

    async def body():
        async with http_client(http_server.url, key) as client:
            return await erase_and_prove(client)

    run(body)


def test_http_another_tenants_key_sees_and_forgets_nothing(http_server):
    acme, _ = http_server.ring.create("acme")
    globex, _ = http_server.ring.create("globex")

    async def body():
        async with http_client(http_server.url, acme) as a, http_client(http_server.url, globex) as g:
            await ok(a, "remember", {"key": "bob/plan", "text": "Bob plans a trip to Lisbon", "subject": "bob"})
            receipt = await ok(a, "forget", {"key": "nothing-here"})
            await ok(g, "remember", {"key": "own", "text": "globex notes on coffee", "subject": "carol"})
            seen = {
                "recall": (await ok(g, "recall", {"query": "Bob trip Lisbon"}))["hits"],
                "read": await ok(g, "read", {"key": "bob/plan"}),
                "forget": await ok(g, "forget", {"subject": "bob"}),
                "prefix": await ok(g, "forget", {"prefix": "bob/"}),
                "status": error_of(await g.call_tool("erasure_status", {"handle": receipt["handle"]})),
                "wait": error_of(await g.call_tool("wait_erasure", {"handle": receipt["handle"], "timeout_s": 0})),
                "verify": error_of(await g.call_tool("verify_erasure", {"handle": receipt["handle"]})),
            }
            after = await ok(a, "read", {"key": "bob/plan"})
            return seen, after

    seen, after = run(body)
    assert [h["key"] for h in seen["recall"]] == ["own"]
    assert seen["read"] == {"found": False, "memory": None}
    for name in ("forget", "prefix"):
        assert seen[name]["erased"] == [] and seen[name]["released"] == [], name
    for name in ("status", "wait", "verify"):
        assert seen[name]["type"] == "NotFound", name
    assert after["found"] is True and after["memory"]["text"] == "Bob plans a trip to Lisbon"


def test_http_refuses_no_key_a_bad_key_and_a_revoked_key(http_server):
    key, listed = http_server.ring.create("acme")
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}

    def post(token: str | None) -> int:
        auth = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.post(http_server.url, json=initialize, headers={**headers, **auth}, timeout=30).status_code

    assert post(key) == 200
    assert post(None) == 401
    assert post("efk_000000000000_" + "x" * 43) == 401
    assert post(key[:-1]) == 401

    async def revoked_mid_session():
        async with http_client(http_server.url, key) as client:
            await ok(client, "remember", {"key": "k", "text": "tea", "subject": "alice"})
            http_server.ring.revoke(listed.id)
            with pytest.raises(MCPError):  # the next request meets a 401
                await client.call_tool("read", {"key": "k"})

    run(revoked_mid_session)
    assert post(key) == 401
    # Every tool, with no key, a bad key and the revoked key: refused before it runs, nothing changed.
    for name in sorted(TOOLS):
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": {"key": "k"}}}
        for token in (None, "efk_nope", key):
            auth = {} if token is None else {"Authorization": f"Bearer {token}"}
            answer = httpx.post(http_server.url, json=call, headers={**headers, **auth}, timeout=30)
            assert answer.status_code == 401, (name, token is None)
            assert "tea" not in answer.text
    owner, _ = http_server.ring.create("acme")

    async def still_there():
        async with http_client(http_server.url, owner) as client:
            return await ok(client, "read", {"key": "k"})

    assert run(still_there)["memory"]["text"] == "tea"


def test_mcp_http_app_served_at_mcp_by_a_host_app(tmp_path):
    """The contract the HTTP server relies on: in a FastAPI app, a route at /mcp whose endpoint
    is the app, and the lifespan entered by the host app's own."""
    with (
        efface.open(tmp_path / "store", embedder="hashing") as store,
        KeyRing(tmp_path / "keys.db") as ring,
    ):
        app, lifespan = mcp_http_app(store, ring, purpose="support")

        @contextlib.asynccontextmanager
        async def host_lifespan(_app):
            async with lifespan():
                yield

        host = FastAPI(lifespan=host_lifespan)
        host.add_route("/mcp", app)  # a Route whose endpoint is the ASGI app

        @host.get("/v1/health")
        def health() -> dict:
            return {"ok": True}

        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(host, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            while not server.started:
                if not thread.is_alive():
                    _cannot_start("uvicorn exited before starting")
                time.sleep(0.02)
            key, _ = ring.create("acme")

            async def body():
                async with http_client(f"http://127.0.0.1:{port}/mcp", key) as client:
                    return await ok(client, "remember", {"key": "k", "text": "tea", "subject": "alice"})

            assert run(body)["epoch"] >= 1
            assert httpx.post(f"http://127.0.0.1:{port}/mcp", json={}, timeout=30).status_code == 401
            assert httpx.post(f"http://127.0.0.1:{port}/mcp/mcp", json={}, timeout=30).status_code == 404
            assert httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=30).json() == {"ok": True}
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        assert store.read("k", tenant="acme", purpose="support") is not None
