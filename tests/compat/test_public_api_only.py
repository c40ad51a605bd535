"""Both compat layers use nothing but the public Store methods a client also has, so they run
unchanged over a served store: here over a proxy that lets only those names through."""

from __future__ import annotations

import pytest

from efface.compat.langgraph import EffaceStore
from efface.compat.mem0 import Memory

PUBLIC = frozenset({"write", "retain", "read", "scan", "recall", "forget", "status", "wait", "verify"})


class PublicOnly:
    """Forwards the public Store methods; anything else is an AttributeError."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        if name not in PUBLIC:
            raise AttributeError(f"compat layers must not use Store.{name}")
        return getattr(self._store, name)


def test_langgraph_store_uses_only_public_methods(store):
    lg = EffaceStore(PublicOnly(store), tenant="acme")
    lg.put(("alice", "prefs"), "drink", {"text": "tea"}, ttl=5)
    assert lg.get(("alice", "prefs"), "drink").value == {"text": "tea"}
    assert [i.key for i in lg.search(("alice",))] == ["drink"]
    assert [i.key for i in lg.search(("alice",), query="tea")] == ["drink"]
    assert lg.list_namespaces(suffix=("prefs",)) == [("alice", "prefs")]
    lg.delete(("alice", "prefs"), "drink")
    assert lg.forget_namespace(("alice",)).level == "intent"
    assert lg.forget_subject("alice").level == "intent"
    assert lg.store.wait(lg.receipts[0].handle, 30).erased


def test_mem0_facade_uses_only_public_methods(store, clock):
    m = Memory(PublicOnly(store), tenant="acme", clock=clock)
    mid = m.add("Alice likes tea", user_id="alice", infer=False, expiration_date="2099-01-01")["results"][0]["id"]
    assert m.search("tea", user_id="alice")["results"][0]["id"] == mid
    m.update(mid, text="Alice likes oolong", expiration_date=None)
    assert [r["memory"] for r in m.get_all(user_id="alice")["results"]] == ["Alice likes oolong"]
    receipt = m.delete(mid)["receipt"]
    assert [h["event"] for h in m.history(mid)] == ["ADD", "UPDATE", "DELETE"]
    assert m.delete_all(user_id="alice")["receipt"]["level"] == "intent"
    assert m.reset()["receipt"]["handle"]
    assert m.store.wait(receipt["handle"], 30).erased


def test_the_proxy_refuses_private_names(store):
    with pytest.raises(AttributeError):
        PublicOnly(store)._origin  # noqa: B018
