"""Tenant isolation over real HTTP: every route, tried with another tenant's key, with a
revoked key, with a malformed key and with no key, is refused or answers only for the key's
own tenant; nothing of the first tenant leaks into any answer, and nothing of it changes."""

from __future__ import annotations

import httpx
import pytest
from fastapi.routing import APIRoute

SECRET_TEXT = "Alice Marchetti takes oolong at 4pm"
KEY, SUBJECT = "acme:alice:note1", "alice-marchetti"


@pytest.fixture
def world(served):
    """acme has a record, a registered subject, a forgotten record (a handle) and a quarantine
    policy; globex has a key and nothing else."""
    acme = served.client("acme")
    acme.write(KEY, SECRET_TEXT, subject=SUBJECT, purpose="support")
    acme.write("acme:alice:gone", "Alice Marchetti's old phone number", subject=SUBJECT, purpose="billing")
    acme.register_subject(SUBJECT, identifiers=["amarchetti@example.org"])
    receipt = acme.forget(subject=SUBJECT, purpose="billing")
    # Settled before any test compares acme's state: the erasure's own progress is not a change.
    assert acme.wait(receipt.handle, timeout=60).erased
    revoked = served.key("acme")
    served.ring.revoke(revoked)
    keys = {
        "other tenant": served.key("globex"),
        "revoked": revoked,
        "malformed": "efk_nothex_" + "x" * 43,
        "unknown": "efk_0123456789ab_" + "A" * 43,
    }
    yield served, acme, receipt.handle, keys
    acme.close()


def bodies(handle: str, tenant: str | None) -> dict[str, dict]:
    """A valid body for every route, naming acme's data."""
    t = {} if tenant is None else {"tenant": tenant}
    return {
        "/v1/write": {"key": KEY, "text": "overwritten", "subject": SUBJECT, "purpose": "support", **t},
        "/v1/write_many": {
            "items": [{"key": KEY, "text": "overwritten"}],
            "subject": SUBJECT,
            "purpose": "support",
            **t,
        },
        "/v1/retain": {"key": KEY, "subject": SUBJECT, "purpose": "support", "basis": "contract", **t},
        "/v1/register_subject": {"subject": SUBJECT, "identifiers": ["someone else"], **t},
        "/v1/read": {"key": KEY, "purpose": "support", **t},
        "/v1/recall": {"query": "oolong Alice Marchetti", "purpose": "support", **t},
        "/v1/scan": {"purpose": "support", **t},
        "/v1/forget": {"subject": SUBJECT, **t},
        "/v1/status": {"handle": handle, **t},
        "/v1/wait": {"handle": handle, "timeout": 0.1, **t},
        "/v1/verify": {"handle": handle, **t},
        "/v1/certificate": {"handle": handle, **t},
        "/v1/certificate.html": {"handle": handle, **t},
        "/v1/receipts": {**t},
        "/v1/ledger": {**t},
        "/v1/ledger/verify": {**t},
        "/v1/set_policy": {"policy": "redact", **t},
        "/v1/quarantined": {**t},
        "/v1/release": {"key": KEY, "reason": "because", **t},
        "/v1/rederive": {"key": KEY, "text": "overwritten", **t},
        "/v1/stats": {**t},
    }


def acme_state(acme, handle):
    """Everything acme can see of itself: it must be the same after every foreign request."""
    return {
        "read": acme.read(KEY, purpose="support"),
        "recall": acme.recall("oolong", purpose="support"),
        "scan": acme.scan(purpose="support"),
        "receipts": acme.receipts(),
        "ledger": acme.ledger(),
        # The erasure's own facts (path epochs are store-wide and move with any tenant's write).
        "status": {
            k: v for k, v in acme.status(handle).to_dict().items() if k in ("level", "counts", "epoch", "erased")
        },
        "quarantined": acme.quarantined(),
    }


def test_every_route_is_listed(world):
    served, _acme, handle, _keys = world
    routes = {r.path for r in served.app.routes if isinstance(r, APIRoute)} - {"/v1/health"}
    assert routes == set(bodies(handle, None)), "a route was added or removed: cover it here"


@pytest.mark.parametrize("who", ["no key", "revoked", "malformed", "unknown"])
def test_without_a_valid_key_every_route_answers_401_and_changes_nothing(world, who):
    served, acme, handle, keys = world
    before = acme_state(acme, handle)
    headers = {} if who == "no key" else {"Authorization": f"Bearer {keys[who]}"}
    for route, body in bodies(handle, None).items():
        r = httpx.post(served.url + route, json=body, headers=headers)
        assert r.status_code == 401, route
        assert r.json()["error"]["type"] == "Unauthorized", route
        assert r.headers["www-authenticate"] == "Bearer"
        assert SECRET_TEXT not in r.text and KEY not in r.text and SUBJECT not in r.text
    assert acme_state(acme, handle) == before


def test_naming_another_tenant_is_refused_with_403_and_changes_nothing(world):
    served, acme, handle, keys = world
    before = acme_state(acme, handle)
    headers = {"Authorization": f"Bearer {keys['other tenant']}"}
    for route, body in bodies(handle, "acme").items():
        r = httpx.post(served.url + route, json=body, headers=headers)
        assert r.status_code == 403, route
        assert r.json()["error"]["type"] == "Forbidden", route
        assert "acme" not in r.text and SECRET_TEXT not in r.text
    assert acme_state(acme, handle) == before


def test_another_tenants_key_sees_and_changes_only_its_own_tenant(world):
    served, acme, handle, keys = world
    before = acme_state(acme, handle)
    headers = {"Authorization": f"Bearer {keys['other tenant']}"}
    for route, body in bodies(handle, None).items():
        r = httpx.post(served.url + route, json=body, headers=headers)
        assert r.status_code < 500, route
        assert SECRET_TEXT not in r.text, route
        assert handle not in r.text, route  # acme's erasure is not globex's to look up
        if route in ("/v1/status", "/v1/wait", "/v1/verify", "/v1/certificate", "/v1/certificate.html"):
            assert r.status_code == 404 and r.json()["error"]["type"] == "NotFound", route
    assert acme_state(acme, handle) == before
    # What globex did went to globex: its own write is there, acme's record is untouched.
    globex = served.client("globex")
    assert globex.read(KEY, purpose="support") is None or globex.read(KEY, purpose="support").tenant == "globex"
    assert acme.read(KEY, purpose="support").text == SECRET_TEXT


def test_forget_everything_with_another_tenants_key_erases_its_own_tenant_only(world):
    served, acme, handle, keys = world
    before = acme_state(acme, handle)
    globex = served.client("globex")
    globex.write("g1", "globex's own note", subject="carol", purpose="support")
    headers = {"Authorization": f"Bearer {keys['other tenant']}"}
    r = httpx.post(served.url + "/v1/forget", json={"everything": True}, headers=headers)
    assert r.status_code == 200 and r.json()["erased"] == ["g1"]
    assert SECRET_TEXT not in r.text and KEY not in r.text and SUBJECT not in r.text
    # Naming acme with everything is refused like any other foreign tenant, before anything runs.
    r = httpx.post(served.url + "/v1/forget", json={"everything": True, "tenant": "acme"}, headers=headers)
    assert r.status_code == 403
    assert acme_state(acme, handle) == before


def test_every_mcp_tool_of_the_served_app_with_another_tenants_key(world):
    """`efface serve`'s /mcp: every tool, called with globex's key on acme's data (forget with
    everything=true included), answers only for globex; acme's data neither leaks nor changes."""
    import asyncio
    import json

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from efface.service.http import create_app
    from efface.service.mcp import mcp_http_app
    from efface.service.runner import BackgroundServer

    served, acme, handle, keys = world
    before = acme_state(acme, handle)
    app = create_app(served.store, served.ring, mcp=mcp_http_app(served.store, served.ring, forget_everything=True))
    calls = {
        "remember": {"key": KEY, "text": "overwritten", "subject": SUBJECT, "purpose": "support"},
        "register_subject": {"subject": SUBJECT, "identifiers": ["someone else entirely"]},
        "read": {"key": KEY, "purpose": "support"},
        "recall": {"query": "oolong Alice Marchetti", "purpose": "support"},
        "forget": {"subject": SUBJECT},
        "erasure_status": {"handle": handle},
        "wait_erasure": {"handle": handle, "timeout_s": 0},
        "verify_erasure": {"handle": handle},
    }

    async def as_globex(url):
        headers = {"Authorization": f"Bearer {keys['other tenant']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            tools = {t.name for t in (await client.list_tools()).tools}
            answers = {name: await client.call_tool(name, args) for name, args in calls.items()}
            answers["forget everything"] = await client.call_tool("forget", {"everything": True})
            return tools, answers

    with BackgroundServer(app, access_log=False) as server:
        tools, answers = asyncio.run(as_globex(server.url + "/mcp"))
    assert tools == set(calls), "a tool was added or removed: cover it here"
    for name, result in answers.items():
        text = json.dumps(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)
        assert SECRET_TEXT not in text and handle not in text, name
        if name in ("erasure_status", "wait_erasure", "verify_erasure"):
            assert result.is_error and json.loads(result.content[0].text)["error"]["type"] == "NotFound", name
    # globex's remember wrote globex's own record under the same key: that is all it reads and forgets.
    assert answers["read"].structured_content["memory"]["text"] == "overwritten"
    assert answers["forget"].structured_content["erased"] == [KEY]
    assert not answers["forget everything"].is_error
    assert acme_state(acme, handle) == before
