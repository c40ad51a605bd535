"""Store.scan: the listing read path (key order, prefix, subject, purpose, paging), on every backend."""

from __future__ import annotations

import pytest

import efface

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""


def _fill(store):
    for key, subject in [("b/2", "bob"), ("a/1", "alice"), ("a/2", "bob"), ("a/10", "alice"), ("ab", "alice")]:
        store.write(key, f"text of {key}", tenant="t", subject=subject, purpose="support")
    store.write("a/3", "other purpose", tenant="t", subject="alice", purpose="analytics")
    store.write("a/1", "other tenant", tenant="u", subject="alice", purpose="support")


def test_scan_lists_live_records_in_key_order(store):
    _fill(store)
    assert [m.key for m in store.scan(tenant="t", purpose="support")] == ["a/1", "a/10", "a/2", "ab", "b/2"]
    assert [m.key for m in store.scan(tenant="t", purpose="support", prefix="a/")] == ["a/1", "a/10", "a/2"]
    assert [m.key for m in store.scan(tenant="t", purpose="support", subject="bob")] == ["a/2", "b/2"]
    assert [m.key for m in store.scan(tenant="t", purpose="analytics")] == ["a/3"]
    first = store.scan(tenant="t", purpose="support", limit=2)
    rest = store.scan(tenant="t", purpose="support", after=first[-1].key, limit=1000)
    assert [m.key for m in first + rest] == ["a/1", "a/10", "a/2", "ab", "b/2"]
    (m,) = store.scan(tenant="t", purpose="support", prefix="a/1", limit=1)
    assert m.text == "text of a/1" and m.claims[0].subject == "alice"


def test_scan_never_lists_what_was_forgotten_or_expired(store, clock):
    _fill(store)
    store.write("a/4", "short lived", tenant="t", subject="carol", purpose="support", ttl=10)
    store.forget(tenant="t", subject="bob")
    assert [m.key for m in store.scan(tenant="t", purpose="support")] == ["a/1", "a/10", "a/4", "ab"]
    clock.advance(11)
    assert [m.key for m in store.scan(tenant="t", purpose="support")] == ["a/1", "a/10", "ab"]


def test_scan_refuses_bad_arguments(store):
    _fill(store)
    with pytest.raises(efface.InvalidInput, match="limit"):
        store.scan(tenant="t", purpose="support", limit=0)
    with pytest.raises(efface.UnknownPurpose):
        store.scan(tenant="t", purpose="nosuch")
