"""efface.Client / efface.open(url) against a real server: the library's types and errors
come back, tenant= is checked by the server, what cannot run remotely says so; and the CLI
with EFFACE_URL goes through the client without opening the store."""

from __future__ import annotations

import asyncio
import json

import pytest

import efface
from efface.service.client import Unreachable
from efface.service.wire import Forbidden, RemoteUnsupported, Unauthorized


def test_same_types_and_errors_as_a_local_store(served):
    with efface.open(served.url, api_key=served.key("acme")) as store:
        assert isinstance(store, efface.Client)
        assert store.write("n1", "Alice prefers tea", tenant="acme", subject="alice", purpose="support") == 1
        assert store.write_many([{"key": "n2", "text": "Bob likes coffee", "subject": "bob"}], purpose="support") == 2
        m = store.read("n1", tenant="acme", purpose="support")
        assert isinstance(m, efface.Memory) and m.claims[0] == efface.Claim("alice", "support", "consent", None)
        hits = store.recall("tea", purpose="support")
        assert hits and isinstance(hits[0], efface.Hit) and hits[0].key == "n1"
        with pytest.raises(efface.UnknownPurpose):
            store.read("n1", purpose="suport")
        with pytest.raises(efface.ScopeError):
            store.forget()
        with pytest.raises(Forbidden) as info:
            store.read("n1", tenant="globex", purpose="support")
        assert isinstance(info.value, efface.ScopeError)
        receipt = store.forget(tenant="acme", subject="alice")
        assert isinstance(receipt, efface.Receipt) and receipt.erased == ("n1",)
        assert isinstance(receipt.paths["ann"], efface.PathState)
        st = store.wait(receipt.handle, timeout=20)
        assert isinstance(st, efface.Status) and st.erased
        v = store.verify(receipt.handle)
        assert v.level == "erased" and v.checks and not v.failed
        with pytest.raises(efface.NotFound):
            store.status("efr_000000000000000000000000")
        assert [r["handle"] for r in store.receipts()] == [receipt.handle]
        assert store.verify_ledger().ok and store.ledger()[0]["handle"] == receipt.handle
        assert store.certificate(receipt.handle)["level"] == "erased"
        for call in (lambda: store.backup("x.bak"), lambda: store.restore("x.bak"), store.compact, store.sweep):
            with pytest.raises(RemoteUnsupported):
                call()
    with pytest.raises(efface.EffaceError):
        store.read("n2", purpose="support")  # closed


def test_bad_key_unreachable_server_and_bad_urls(served):
    with efface.Client(served.url, api_key="efk_0123456789ab_" + "A" * 43) as c, pytest.raises(Unauthorized):
        c.receipts()
    with efface.Client("http://127.0.0.1:9", api_key="efk_x", timeout=2) as c, pytest.raises(Unreachable):
        c.receipts()
    with pytest.raises(efface.InvalidInput):
        efface.open(served.url, api_key="k", embedder="hashing")
    with pytest.raises(efface.OriginUnreachable):
        efface.open("postgres://db.invalid/x")


@pytest.mark.parametrize("url", ["http://", "https:///v1", "http://:8750"])
def test_a_server_url_without_a_host_is_invalid_input(url):
    """It was taken, and every call then failed as Unreachable (a network error), telling the
    caller to check a server that was never named."""
    with pytest.raises(efface.InvalidInput, match="names no host"):
        efface.Client(url, api_key="efk_x")


def test_a_password_in_the_server_url_is_never_shown():
    """The URL's password was echoed in every Unreachable message and in the client's repr."""
    with efface.open("http://bob:hunter2@127.0.0.1:9/", api_key="efk_x", timeout=2) as c:
        assert "hunter2" not in repr(c) and "127.0.0.1:9" in repr(c)
        with pytest.raises(Unreachable) as info:
            c.receipts()
    assert "hunter2" not in str(info.value) and "127.0.0.1:9" in str(info.value)


@pytest.mark.parametrize("secret", ["pa/ss9", "pa#ss9", "pa?ss9"])
def test_a_password_with_an_unescaped_slash_hash_or_question_mark_is_never_shown(secret):
    """httpx took the password's first part for a port and raised its raw InvalidURL,
    quoting it; and the repr kept what urlsplit put outside the user part."""
    from efface.service.client import _shown

    url = f"http://alice:{secret}@127.0.0.1:9"
    with pytest.raises(efface.InvalidInput) as info:
        efface.open(url, api_key="efk_x")
    assert secret not in str(info.value) and "ss9" not in str(info.value) and "alice" not in str(info.value)
    shown = _shown(url)
    assert secret not in shown and "ss9" not in shown and shown.endswith("127.0.0.1:9")


@pytest.mark.parametrize("timeout", [-1, 0, float("nan"), float("inf"), "30", None, True])
def test_a_client_timeout_that_is_not_positive_seconds_is_invalid_input(timeout):
    """-1 raised httpx's raw ValueError at the first request, "30" a raw TypeError."""
    with pytest.raises(efface.InvalidInput, match="timeout"):
        efface.open("http://127.0.0.1:9", api_key="efk_x", timeout=timeout)


def test_efface_serve_and_the_cli_in_other_processes(tmp_path):
    """`efface serve` in its own process; `efface keys create` and the CLI (EFFACE_URL) in
    others, while the server holds the store."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("EFFACE_URL", None)
    store = str(tmp_path / "store")
    cmd = [sys.executable, "-m", "efface", "serve", "--store", store, "--embedder", "hashing", "--port", str(port)]
    cmd += ["--purpose", "support"]  # the MCP endpoint's default purpose
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                if os.environ.get("CI") == "true":
                    pytest.fail("efface serve did not start")
                pytest.skip("efface serve did not start on loopback")
            time.sleep(0.2)

        def efface_cli(*args, **extra):
            out = subprocess.run(
                [sys.executable, "-m", "efface", *args, "--json"],
                env={**env, **extra},
                capture_output=True,
                text=True,
                timeout=120,
            )
            return out.returncode, json.loads(out.stdout)

        code, created = efface_cli("keys", "create", "--store", store, "--tenant", "acme")
        assert code == 0
        # The MCP server answers in the same process, at /mcp, behind the same keys.
        mcp_headers = {"Accept": "application/json, text/event-stream"}
        assert httpx.post(url + "/mcp", json={}, headers=mcp_headers).status_code == 401
        remembered, recalled = asyncio.run(_remember_and_recall_over_mcp(url + "/mcp", created["key"]))
        assert remembered["key"] == "m1" and [h["key"] for h in recalled["hits"]] == ["m1"]
        remote = {"EFFACE_URL": url, "EFFACE_API_KEY": created["key"]}
        code, _ = efface_cli("write", "n1", "Alice prefers tea", "--subject", "alice", "--purpose", "support", **remote)
        assert code == 0
        code, receipt = efface_cli("forget", "--key", "n1", **remote)
        assert code == 0 and receipt["erased"] == ["n1"]
        code, doc = efface_cli("read", "n1", "--purpose", "support", "--store", store)
        assert code == 1 and doc["error"]["type"] == "StoreLocked"  # the server holds the store
    finally:
        server.terminate()
        logs = server.communicate(timeout=30)[0].decode()
    assert "Alice" not in logs and created["key"] not in logs and "POST /v1/write" in logs
    assert "chess" not in logs


async def _remember_and_recall_over_mcp(url: str, key: str) -> tuple[dict, dict]:
    """An agent that names no purpose: the server's --purpose is used."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        wrote = await client.call_tool("remember", {"key": "m1", "text": "Bob plays chess", "subject": "bob"})
        found = await client.call_tool("recall", {"query": "chess"})
    assert not wrote.is_error and not found.is_error, (wrote.content, found.content)
    assert isinstance(wrote.structured_content, dict) and isinstance(found.structured_content, dict)
    return wrote.structured_content, found.structured_content


def test_the_listing_read_and_the_langgraph_store_over_a_served_store(served):
    from efface.compat.langgraph import EffaceStore

    with efface.open(served.url, api_key=served.key("acme")) as store:
        for i in range(5):
            store.write(f"k{i}", f"note {i} about tea", tenant="acme", subject="alice", purpose="support")
        page = store.scan(purpose="support", prefix="k", limit=3)
        assert [m.key for m in page] == ["k0", "k1", "k2"] and isinstance(page[0], efface.Memory)
        assert [m.key for m in store.scan(purpose="support", after="k2")] == ["k3", "k4"]
        with pytest.raises(efface.InvalidInput):
            store.scan(purpose="support", limit=0)
        lg = EffaceStore(store, tenant="acme", purpose="support")
        lg.put(("alice",), "pref", {"drink": "oolong"})
        assert lg.get(("alice",), "pref").value == {"drink": "oolong"}
        assert [i.key for i in lg.search(("alice",))] == ["pref"]
        lg.delete(("alice",), "pref")
        assert lg.get(("alice",), "pref") is None
        receipt = lg.last_receipt
        assert store.wait(receipt.handle, timeout=20).erased
        assert store.verify(receipt.handle).level == "erased"


def test_the_mem0_facade_over_a_served_store_takes_the_keys_tenant(served, tmp_path):
    """tenant=None means the API key's tenant to a client: the facade passes it on (and
    refuses it over a local store, which has no key to take it from)."""
    from efface.compat.mem0 import Memory

    with efface.open(served.url, api_key=served.key("acme")) as store:
        m = Memory(store, tenant=None)
        m.add("Alice prefers oolong", user_id="alice", infer=False)
        assert [r["memory"] for r in m.get_all(filters={"user_id": "alice"})["results"]] == ["Alice prefers oolong"]
        assert [r.text for r in store.recall("oolong", tenant="acme", purpose="memory")] == ["Alice prefers oolong"]
    with (
        efface.open(tmp_path / "local", embedder="hashing", background=False) as local,
        pytest.raises(efface.InvalidInput, match="tenant"),
    ):
        Memory(local, tenant=None)


def test_a_replacing_write_over_a_served_store(served):
    with efface.open(served.url, api_key=served.key("acme")) as store:
        store.write("k1", "alice prefers zephyrine tea", subject="alice", purpose="support")
        with pytest.raises(efface.KeyInUse):
            store.write("k1", "bob's plan", subject="bob", purpose="support")
        store.write("k1", "bob's plan", subject="bob", purpose="support", replace=True)
        m = store.read("k1", purpose="support")
        assert m.text == "bob's plan" and [c.subject for c in m.claims] == ["bob"]
        (replaced,) = [r for r in store.receipts() if r["kind"] == "replace"]
        assert store.wait(replaced["handle"], timeout=20).erased
        assert store.verify(replaced["handle"]).level == "erased"


def test_the_client_lets_idle_connections_go_before_the_server_does():
    # With both at 5 s (httpx's and uvicorn's defaults) a request could go out on a connection
    # the server was closing, and fail as Unreachable.
    from efface.service import client, runner

    config = runner.uvicorn_config(object())
    assert client.KEEP_ALIVE_S < config.timeout_keep_alive == runner.KEEP_ALIVE_S
    c = efface.Client("http://127.0.0.1:9", api_key="efk_000000000000_" + "a" * 43)
    try:
        assert c._http._transport._pool._keepalive_expiry == client.KEEP_ALIVE_S
    finally:
        c.close()


@pytest.mark.parametrize(
    "bad",
    [
        "efk_0123456789ab_secret\r\nX-Injected: yes",
        "efk_0123456789ab_secret\n",
        "efk_0123456789ab_sec\x00ret",
        "efk_0123456789ab_sécret",
        "efk_0123456789ab_sec ret",
        "efk_0123456789ab_\ud800",
        b"efk_0123456789ab_secret",
    ],
    ids=["crlf", "newline", "nul", "non-ascii", "space", "surrogate", "bytes"],
)
def test_a_key_that_cannot_be_sent_is_invalid_input_without_the_key(served, bad):
    """#33: CR/LF or NUL raised Unreachable (whose doc says retry) with the server up; a
    non-ASCII character a raw UnicodeEncodeError naming it and its place in the key."""
    with pytest.raises(efface.InvalidInput) as info, efface.open(served.url, api_key=bad) as store:
        store.receipts()
    assert not isinstance(info.value, Unreachable)
    message = str(info.value)
    shown = bad.decode() if isinstance(bad, bytes) else bad
    assert shown not in message and "sec" not in message and "é" not in message and "position" not in message
