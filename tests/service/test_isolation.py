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
    acme.wait(receipt.handle, timeout=10)
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
