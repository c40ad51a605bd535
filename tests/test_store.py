"""The store's contract (docs/concepts.md §2, §4, §7): write, read, recall, retain, forget, TTL,
receipts, epochs, locking. Every test runs on every backend through the ``store`` fixture."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

import efface

from conftest import ann_vectors, behind, on_postgres

HTTP_CONTRACT = True
"""The API-level contract also runs through a served store (the http backend, conftest)."""

DAY = 86_400.0


# -- helpers ----------------------------------------------------------------------------------
def put(store, key, text, *, tenant="acme", subject="alice", purpose="support", **kw):
    return store.write(key, text, tenant=tenant, subject=subject, purpose=purpose, **kw)


def text_of(store, key, *, tenant="acme", purpose="support"):
    m = store.read(key, tenant=tenant, purpose=purpose)
    return None if m is None else m.text


def recall_keys(store, query, *, tenant="acme", purpose="support", subject=None, k=100):
    return [h.key for h in store.recall(query, tenant=tenant, purpose=purpose, subject=subject, k=k)]


def fts_keys(store, query, *, tenant="acme", purpose="support", subject=None, k=100):
    """Keys that recall found by their words (the full-text path proposed them)."""
    return [h.key for h in store.recall(query, tenant=tenant, purpose=purpose, subject=subject, k=k) if "fts" in h.via]


def live_keys(store, keys, *, tenant="acme", purpose="support"):
    return {k for k in keys if store.read(k, tenant=tenant, purpose=purpose) is not None}


# -- write / read -----------------------------------------------------------------------------
def test_write_then_read_returns_everything_written(store):
    epoch = put(store, "n1", "Alice prefers green tea", metadata={"lang": "en", "n": 1}, sources=["chat:1", "chat:2"])
    m = store.read("n1", tenant="acme", purpose="support")
    assert isinstance(epoch, int) and epoch > 0
    assert m.key == "n1" and m.text == "Alice prefers green tea" and m.tenant == "acme"
    assert dict(m.metadata) == {"lang": "en", "n": 1}
    assert m.sources == ("chat:1", "chat:2")
    assert [(c.subject, c.purpose, c.basis, c.expires_at) for c in m.claims] == [("alice", "support", "consent", None)]
    assert store.read("missing", tenant="acme", purpose="support") is None
    (hit,) = store.recall("green tea", tenant="acme", purpose="support")
    assert (hit.key, hit.text, dict(hit.metadata)) == ("n1", "Alice prefers green tea", {"lang": "en", "n": 1})
    assert hit.score > 0 and set(hit.via) == {"ann", "fts"}
    json.dumps([m.to_dict(), hit.to_dict()])


def test_write_existing_key_replaces_text_and_old_words_are_not_recallable(store):
    put(store, "n1", "the locker code is amethyst")
    put(store, "n2", "unrelated note about quartz")
    assert "n1" in fts_keys(store, "amethyst")
    put(store, "n1", "the locker code was changed")
    assert text_of(store, "n1") == "the locker code was changed"
    hits = store.recall("amethyst", tenant="acme", purpose="support", k=100)
    assert all("amethyst" not in h.text for h in hits)
    assert "n1" not in [h.key for h in hits if "fts" in h.via]
    # Same once the ANN has absorbed the change.
    store.compact()
    assert "n1" not in fts_keys(store, "amethyst")
    assert "n1" in fts_keys(store, "changed")


def test_write_existing_key_keeps_other_claims(store):
    put(store, "n1", "first version", subject="alice", purpose="support")
    put(store, "n1", "second version", subject="alice", purpose="analytics")
    assert text_of(store, "n1", purpose="support") == "second version"
    assert text_of(store, "n1", purpose="analytics") == "second version"
    # Another subject's write would leave alice's claim on text it was not made for
    # (issue #12; tests/test_hostile_ids.py has the rest).
    with pytest.raises(efface.KeyInUse):
        put(store, "n1", "third version", subject="bob", purpose="analytics")
    assert text_of(store, "n1", purpose="support") == "second version"


# -- claims compose as a union ------------------------------------------------------------------
def test_record_lives_while_any_claim_lives(store):
    put(store, "n1", "shared memory of a meeting", subject="alice")
    store.retain("n1", tenant="acme", subject="bob", purpose="support", basis="contract")

    r1 = store.forget(tenant="acme", subject="alice")
    assert r1.erased == ()
    assert [(r.key, r.subject, r.purpose) for r in r1.released] == [("n1", "alice", "support")]
    assert [(r.key, r.purpose, r.basis) for r in r1.retained] == [("n1", "support", "contract")]
    assert "union" in r1.retained[0].reason
    m = store.read("n1", tenant="acme", purpose="support")
    assert m is not None and [c.subject for c in m.claims] == ["bob"]

    r2 = store.forget(tenant="acme", subject="bob")
    assert r2.erased == ("n1",)
    assert store.read("n1", tenant="acme", purpose="support") is None


def test_retain_adds_a_claim_under_another_purpose(store):
    put(store, "n1", "invoice dispute notes", purpose="support")
    put(store, "other", "something for billing", purpose="billing")
    store.retain("n1", tenant="acme", subject="alice", purpose="billing", basis="contract")
    assert text_of(store, "n1", purpose="billing") == "invoice dispute notes"
    r = store.forget(tenant="acme", purpose="support")
    assert r.erased == ()
    assert text_of(store, "n1", purpose="support") is None
    assert text_of(store, "n1", purpose="billing") == "invoice dispute notes"


def test_retain_unknown_key_is_not_found_and_changes_nothing(store):
    put(store, "n1", "a note")
    before = store.stats()["epoch"]
    with pytest.raises(efface.NotFound):
        store.retain("nope", tenant="acme", subject="alice", purpose="support", basis="consent")
    with pytest.raises(efface.NotFound):  # same key, other tenant
        store.retain("n1", tenant="globex", subject="alice", purpose="support", basis="consent")
    assert store.stats()["epoch"] == before
    assert text_of(store, "n1") == "a note"


# -- forget: selectors ------------------------------------------------------------------------
def test_forget_by_subject_only_touches_that_subject_in_that_tenant(store):
    put(store, "a1", "alice memory one", subject="alice")
    put(store, "a2", "alice memory two", subject="alice", purpose="analytics")
    put(store, "b1", "bob memory", subject="bob")
    put(store, "a1", "alice in another tenant", tenant="globex", subject="alice")
    put(store, "alice", "a key that is the subject's name", subject="carol")

    r = store.forget(tenant="acme", subject="alice")
    assert sorted(r.erased) == ["a1", "a2"]
    assert sorted((x.key, x.purpose) for x in r.released) == [("a1", "support"), ("a2", "analytics")]
    assert text_of(store, "a1") is None
    assert text_of(store, "a2", purpose="analytics") is None
    assert text_of(store, "b1") == "bob memory"
    assert text_of(store, "alice") == "a key that is the subject's name"
    assert text_of(store, "a1", tenant="globex") == "alice in another tenant"


def test_forget_by_purpose(store):
    put(store, "s1", "support only", purpose="support")
    put(store, "x1", "analytics only", purpose="analytics")
    put(store, "both", "in both scopes", purpose="support")
    store.retain("both", tenant="acme", subject="alice", purpose="analytics", basis="consent")
    put(store, "x1", "other tenant analytics", tenant="globex", purpose="analytics")

    r = store.forget(tenant="acme", purpose="analytics")
    assert r.erased == ("x1",)
    assert [(x.key, x.purpose) for x in r.retained] == [("both", "support")]
    assert text_of(store, "x1", purpose="analytics") is None
    assert text_of(store, "both", purpose="analytics") is None
    assert text_of(store, "both", purpose="support") == "in both scopes"
    assert text_of(store, "s1") == "support only"
    assert text_of(store, "x1", tenant="globex", purpose="analytics") == "other tenant analytics"


def test_forget_by_prefix_is_an_exact_prefix_not_a_pattern(store):
    keys = {
        "acme:s:1": True,
        "acme:s:10": True,
        "acme:s:": True,  # match
        "acme:s": False,
        "acme:S:1": False,
        "acme:t:1": False,
        "acme-s:1": False,
        "xacme:s:1": False,
        "acme%s:1": False,
        "acme_s:1": False,
        "acme:": False,
    }
    for i, key in enumerate(keys):
        put(store, key, f"note number {i}")
    r = store.forget(tenant="acme", prefix="acme:s:")
    assert sorted(r.erased) == sorted(k for k, gone in keys.items() if gone)
    assert live_keys(store, keys) == {k for k, gone in keys.items() if not gone}

    # LIKE wildcards in a prefix are plain characters.
    r2 = store.forget(tenant="acme", prefix="acme%")
    assert r2.erased == ("acme%s:1",)
    r3 = store.forget(tenant="acme", prefix="acme_")
    assert r3.erased == ("acme_s:1",)
    assert live_keys(store, keys) == {"acme:s", "acme:S:1", "acme:t:1", "acme-s:1", "xacme:s:1", "acme:"}


def test_forget_by_key_is_exact(store):
    for key in ("k1", "k10", "k", "K1"):
        put(store, key, f"note {key}")
    r = store.forget(tenant="acme", key="k1")
    assert r.erased == ("k1",)
    assert live_keys(store, ["k1", "k10", "k", "K1"]) == {"k10", "k", "K1"}


def test_forget_combinations_intersect(store):
    put(store, "p:1", "alice support", subject="alice", purpose="support")
    put(store, "p:2", "bob support", subject="bob", purpose="support")
    put(store, "q:1", "alice support outside the prefix", subject="alice", purpose="support")
    put(store, "p:3", "alice analytics", subject="alice", purpose="analytics")
    store.retain("p:1", tenant="acme", subject="alice", purpose="analytics", basis="consent")

    # subject + prefix
    r = store.forget(tenant="acme", subject="alice", prefix="p:", purpose="support")
    assert r.erased == ()  # p:1 is still held for analytics
    assert [(x.key, x.subject, x.purpose) for x in r.released] == [("p:1", "alice", "support")]
    assert [(x.key, x.purpose) for x in r.retained] == [("p:1", "analytics")]
    assert text_of(store, "p:1", purpose="support") is None
    assert text_of(store, "p:1", purpose="analytics") == "alice support"
    assert text_of(store, "p:2") == "bob support"
    assert text_of(store, "q:1") == "alice support outside the prefix"
    assert text_of(store, "p:3", purpose="analytics") == "alice analytics"

    # key + purpose
    r = store.forget(tenant="acme", key="p:1", purpose="analytics")
    assert r.erased == ("p:1",)
    # subject + purpose
    r = store.forget(tenant="acme", subject="alice", purpose="analytics")
    assert r.erased == ("p:3",)
    assert live_keys(store, ["p:1", "p:2", "q:1"]) == {"p:2", "q:1"}


def test_forget_matching_nothing_is_an_empty_receipt(store):
    put(store, "n1", "a note", subject="alice")
    r = store.forget(tenant="acme", subject="nobody")
    assert r.erased == () and r.released == () and r.retained == ()
    assert text_of(store, "n1") == "a note"


def test_forget_naming_nothing_beyond_the_tenant_is_refused(store):
    put(store, "n1", "a note")
    epoch, ledger = store.stats()["epoch"], len(store.ledger())
    with pytest.raises(efface.ScopeError):
        store.forget(tenant="acme")
    with pytest.raises(efface.ScopeError):
        store.forget(tenant="acme", subject=None, purpose=None, prefix=None, key=None)
    assert text_of(store, "n1") == "a note"
    assert store.stats()["epoch"] == epoch
    assert len(store.ledger()) == ledger
    assert store.receipts() == []


# -- legal bases --------------------------------------------------------------------------------
@pytest.mark.parametrize("basis", ["legal_hold", "legal_obligation"])
def test_legal_claims_survive_a_forget_that_does_not_name_their_purpose(store, basis):
    put(store, "n1", "contract signed on the phone", purpose="support")
    store.retain("n1", tenant="acme", subject="alice", purpose="audit", basis=basis)
    put(store, "n2", "only under audit", purpose="audit", basis=basis)

    for selector in ({"subject": "alice"}, {"prefix": "n"}, {"key": "n2"}):
        r = store.forget(tenant="acme", **selector)
        assert r.erased == ()
        held = [x for x in r.retained if x.purpose == "audit"]
        assert held and all(x.basis == basis and basis in x.reason for x in held)
        assert all(x.purpose != "audit" for x in r.released)
    assert text_of(store, "n1", purpose="support") is None  # the consent claim went
    assert text_of(store, "n1", purpose="audit") == "contract signed on the phone"
    assert text_of(store, "n2", purpose="audit") == "only under audit"

    r = store.forget(tenant="acme", subject="alice", purpose="audit")
    assert sorted(r.erased) == ["n1", "n2"]
    assert sorted((x.key, x.basis) for x in r.released) == [("n1", basis), ("n2", basis)]
    assert live_keys(store, ["n1", "n2"], purpose="audit") == set()


# -- purpose limitation and subject / tenant scoping ----------------------------------------------
def test_purpose_limitation_on_read_and_recall(store):
    put(store, "hold", "the wire transfer dispute with Alice", purpose="audit", basis="legal_hold")
    put(store, "sup", "Alice asked about her delivery", purpose="support")
    assert text_of(store, "hold", purpose="support") is None
    assert text_of(store, "hold", purpose="audit") is not None
    assert "hold" not in recall_keys(store, "wire transfer dispute", purpose="support")
    assert "hold" in fts_keys(store, "wire transfer dispute", purpose="audit")
    assert "sup" not in recall_keys(store, "delivery", purpose="audit")


def test_recall_filters_by_subject(store):
    put(store, "a", "green tea every morning", subject="alice")
    put(store, "b", "green tea in the afternoon", subject="bob")
    put(store, "ab", "green tea shared by both", subject="alice")
    store.retain("ab", tenant="acme", subject="bob", purpose="support", basis="consent")
    put(store, "b-other", "green tea for another purpose", subject="bob", purpose="analytics")
    assert sorted(recall_keys(store, "green tea", subject="bob")) == ["ab", "b"]
    assert sorted(recall_keys(store, "green tea", subject="alice")) == ["a", "ab"]
    assert sorted(recall_keys(store, "green tea")) == ["a", "ab", "b"]
    assert recall_keys(store, "green tea", subject="nobody") == []


def test_recall_is_isolated_per_tenant(store):
    put(store, "n1", "acme's secret roadmap", tenant="acme")
    put(store, "g1", "acme's secret roadmap", tenant="globex")
    put(store, "g2", "globex quarterly numbers", tenant="globex")
    hits = store.recall("secret roadmap", tenant="acme", purpose="support", k=100)
    assert [h.key for h in hits] == ["n1"]
    assert sorted(recall_keys(store, "secret roadmap", tenant="globex")) == ["g1", "g2"]
    store.forget(tenant="globex", key="g1")
    assert recall_keys(store, "secret roadmap", tenant="acme") == ["n1"]


# -- read-safety while the ANN lags -------------------------------------------------------------
@pytest.mark.ann_files("asserts the ANN is pending after a forget")
def test_recall_never_returns_erased_records_while_ann_is_pending(store):
    secrets = {
        f"al{i}": f"alice secret {w} number {i}"
        for i, w in enumerate(["lighthouse", "saffron", "tundra", "obsidian", "marigold", "vortex"])
    }
    for key, text in secrets.items():
        put(store, key, text, subject="alice")
    put(store, "bob1", "bob likes the lighthouse too", subject="bob")
    # A recall brings the ANN up to date with the writes: both paths now propose them.
    hits = store.recall(secrets["al0"], tenant="acme", purpose="support", k=100)
    assert {"ann", "fts"} <= set(next(h.via for h in hits if h.key == "al0"))
    ann_size = ann_vectors(store, "acme")
    assert ann_size == len(secrets) + 1

    receipt = store.forget(tenant="acme", subject="alice")
    assert sorted(receipt.erased) == sorted(secrets)
    assert receipt.paths["ann"].state == "pending"
    assert receipt.paths["ann"].applied_epoch < receipt.epoch
    assert receipt.paths["fts"].state == "absorbed"
    assert receipt.paths["origin"].state == "absorbed"
    # The ANN still holds every erased vector (nothing has absorbed the erasure) ...
    assert ann_vectors(store, "acme") == ann_size
    for key, text in secrets.items():
        hits = store.recall(text, tenant="acme", purpose="support", k=100)
        # ... yet neither the ANN candidates nor the FTS ones let erased content out.
        assert [h.key for h in hits] == ["bob1"]
        assert all("alice secret" not in h.text for h in hits)
        assert store.read(key, tenant="acme", purpose="support") is None
    assert store.status(receipt.handle).paths["ann"].state == "pending"
    assert store.status(receipt.handle).pending_deletions == len(secrets)

    st = store.wait(receipt.handle, timeout=30)
    assert st.settled
    assert {name: p.state for name, p in st.paths.items()} == {
        "origin": "absorbed",
        "fts": "absorbed",
        "ann": "absorbed",
    }
    assert all(p.applied_epoch >= receipt.epoch for p in st.paths.values())
    assert st.pending_deletions == 0
    assert ann_vectors(store, "acme") == 1
    assert recall_keys(store, secrets["al3"]) == ["bob1"]


@pytest.mark.ann_files("asserts a forget is not settled at once")
def test_status_reports_paths_and_counts(store):
    put(store, "n1", "one", subject="alice")
    put(store, "n2", "two", subject="alice")
    store.retain("n2", tenant="acme", subject="bob", purpose="support", basis="consent")
    r = store.forget(tenant="acme", subject="alice")
    st = store.status(r.handle)
    assert (st.handle, st.epoch, st.kind, st.level) == (r.handle, r.epoch, "forget", "intent")
    assert dict(st.counts) == {"released": 2, "erased": 1, "retained": 1, "quarantined": 0}
    assert set(st.paths) == set(r.paths) == {"origin", "fts", "ann"}
    assert not st.settled
    assert st.max_propagation_s == r.max_propagation_s
    assert st.acknowledged_at == r.acknowledged_at


def test_status_of_unknown_handle_is_not_found(store):
    put(store, "n1", "one")
    store.forget(tenant="acme", key="n1")
    with pytest.raises(efface.NotFound):
        store.status("efr_000000000000000000000000")
    with pytest.raises(KeyError):  # NotFound is also a KeyError
        store.status("efr_unknown")
    with pytest.raises(efface.NotFound):
        store.wait("efr_unknown", timeout=0)
    with pytest.raises(efface.InvalidInput):
        store.status("")


def test_receipts_survive_close_and_reopen(store, reopen):
    put(store, "n1", "one", subject="alice")
    put(store, "n2", "two", subject="alice")
    put(store, "n3", "three", subject="bob")
    r1 = store.forget(tenant="acme", subject="alice")
    r2 = store.forget(tenant="acme", key="n3")
    before = {r.handle: store.status(r.handle) for r in (r1, r2)}

    store2 = reopen(store)
    for r in (r1, r2):
        st = store2.status(r.handle)
        assert (st.epoch, st.kind, st.level) == (r.epoch, "forget", "intent")
        assert dict(st.counts) == dict(before[r.handle].counts)
        assert st.acknowledged_at == r.acknowledged_at
        assert st.settled  # close() absorbs every pending erasure
    assert [row["handle"] for row in store2.receipts()] == [r1.handle, r2.handle]
    assert store2.read("n1", tenant="acme", purpose="support") is None
    assert store2.recall("one two three", tenant="acme", purpose="support") == []


# -- TTL ---------------------------------------------------------------------------------------
def test_expired_claim_is_unreadable_before_sweep_then_swept_with_a_receipt(store, clock):
    put(store, "t1", "ephemeral pelican note", ttl=60)
    put(store, "keep", "durable heron note")
    clock.advance(59)
    assert text_of(store, "t1") == "ephemeral pelican note"
    assert "t1" in fts_keys(store, "pelican")

    clock.advance(2)
    assert text_of(store, "t1") is None
    assert "t1" not in recall_keys(store, "ephemeral pelican note")
    assert store.stats()["records"] == 2  # not swept yet: hidden by the read-time check
    assert store.receipts() == []

    receipts = store.sweep()
    assert len(receipts) == 1
    r = receipts[0]
    assert r.kind == "expire" and r.erased == ("t1",)
    assert r.selector == efface.Selector("acme")
    assert [(x.key, x.purpose) for x in r.released] == [("t1", "support")]
    assert store.status(r.handle).kind == "expire"
    assert store.stats()["records"] == 1
    assert store.sweep() == []
    assert store.verify_ledger().ok and store.ledger()[-1]["handle"] == r.handle
    assert text_of(store, "keep") == "durable heron note"
    assert recall_keys(store, "ephemeral pelican note") == ["keep"]


def test_a_claim_without_ttl_keeps_the_record_when_another_expires(store, clock):
    put(store, "n1", "note with two scopes", purpose="session", ttl=7 * DAY)
    store.retain("n1", tenant="acme", subject="alice", purpose="support", basis="contract")
    clock.advance(7 * DAY + 1)
    assert text_of(store, "n1", purpose="session") is None
    assert text_of(store, "n1", purpose="support") == "note with two scopes"
    (r,) = store.sweep()
    assert r.kind == "expire" and r.erased == ()
    assert [(x.key, x.purpose, x.basis, x.expires_at) for x in r.retained] == [("n1", "support", "contract", None)]
    assert text_of(store, "n1", purpose="support") == "note with two scopes"


def test_ttl_accepts_timedelta_and_retain_ttl_expires(store, clock):
    import datetime as dt

    put(store, "n1", "timedelta note", ttl=dt.timedelta(hours=1))
    m = store.read("n1", tenant="acme", purpose="support")
    assert m.claims[0].expires_at == pytest.approx(clock() + 3600)
    put(store, "n2", "archive note", purpose="archive")
    store.retain("n2", tenant="acme", subject="alice", purpose="support", basis="consent", ttl=30)
    clock.advance(31)
    assert text_of(store, "n2", purpose="support") is None
    assert text_of(store, "n2", purpose="archive") == "archive note"
    assert text_of(store, "n1") == "timedelta note"


def test_rewriting_a_key_whose_claim_expired_does_not_revive_old_text(store, clock):
    put(store, "n1", "old passphrase walrus", ttl=10)
    put(store, "n2", "something under archive", purpose="archive")
    clock.advance(11)
    # The write honours the due expiry first: the old record is erased, not updated.
    put(store, "n1", "fresh content about otters", purpose="archive")
    assert [r["kind"] for r in store.receipts()] == ["expire"]
    assert text_of(store, "n1", purpose="support") is None
    m = store.read("n1", tenant="acme", purpose="archive")
    assert m.text == "fresh content about otters"
    assert [(c.purpose, c.expires_at) for c in m.claims] == [("archive", None)]
    for purpose in ("support", "archive"):
        hits = store.recall("old passphrase walrus", tenant="acme", purpose=purpose, k=100)
        assert all("walrus" not in h.text for h in hits)
        assert "n1" not in [h.key for h in hits if "fts" in h.via]


def test_retaining_a_key_whose_claim_expired_does_not_revive_it(store, clock):
    put(store, "n1", "old passphrase walrus", ttl=10)
    put(store, "n2", "something under archive", purpose="archive")
    clock.advance(11)
    with pytest.raises(efface.NotFound):
        store.retain("n1", tenant="acme", subject="alice", purpose="archive", basis="consent")
    assert text_of(store, "n1", purpose="archive") is None
    assert text_of(store, "n1", purpose="support") is None
    assert "n1" not in recall_keys(store, "old passphrase walrus", purpose="archive")
    assert [r["kind"] for r in store.receipts()] == ["expire"]


# -- epochs ------------------------------------------------------------------------------------
def test_epochs_strictly_increase_across_every_mutation_and_reopen(store, reopen, clock):
    epochs = [put(store, "n1", "one", ttl=5)]
    epochs.append(put(store, "n2", "two"))
    epochs.append(store.retain("n2", tenant="acme", subject="bob", purpose="support", basis="consent"))
    epochs.append(store.register_subject("alice", tenant="acme", identifiers=["Alice", "alice@example.com"]))
    epochs.append(store.forget(tenant="acme", subject="bob").epoch)
    clock.advance(6)
    epochs.extend(r.epoch for r in store.sweep())
    epochs.append(store.write_many([{"key": "n3", "text": "three"}], tenant="acme", subject="c", purpose="support"))
    store = reopen(store)
    epochs.append(put(store, "n4", "four"))
    epochs.append(store.forget(tenant="acme", key="n4").epoch)
    assert len(epochs) == 9
    assert all(a < b for a, b in itertools.pairwise(epochs)), epochs
    assert store.stats()["epoch"] == epochs[-1]


def test_write_many_is_one_epoch(store):
    put(store, "first", "the first note")
    before = store.stats()["epoch"]
    items = [{"key": f"m{i}", "text": f"batch note {i}"} for i in range(5)]
    items.append({"key": "m-bob", "text": "bob's batch note", "subject": "bob", "purpose": "analytics"})
    epoch = store.write_many(items, tenant="acme", subject="alice", purpose="support")
    assert epoch == before + 1 == store.stats()["epoch"]
    assert live_keys(store, [f"m{i}" for i in range(5)]) == {f"m{i}" for i in range(5)}
    m = store.read("m-bob", tenant="acme", purpose="analytics")
    assert m.text == "bob's batch note" and m.claims[0].subject == "bob"
    r = store.forget(tenant="acme", subject="alice", prefix="m")
    assert sorted(r.erased) == [f"m{i}" for i in range(5)]
    assert text_of(store, "first") == "the first note"


def test_write_many_rejects_a_bad_item_and_writes_nothing(store):
    put(store, "first", "the first note")
    before = store.stats()
    items = [{"key": "ok", "text": "fine"}, {"key": "bad", "text": "   "}]
    with pytest.raises(efface.InvalidInput):
        store.write_many(items, tenant="acme", subject="alice", purpose="support")
    with pytest.raises(efface.InvalidInput):
        store.write_many(
            [{"key": "d", "text": "x"}, {"key": "d", "text": "y"}], tenant="acme", subject="alice", purpose="support"
        )
    with pytest.raises(efface.InvalidInput):
        store.write_many([], tenant="acme", subject="alice", purpose="support")
    assert store.stats() == before
    assert text_of(store, "ok") is None


# -- register_subject --------------------------------------------------------------------------
def test_register_subject_is_a_mutation_and_touches_no_record(store):
    put(store, "n1", "Alice Liddell wrote in", subject="alice")
    e1 = store.register_subject("alice", tenant="acme", identifiers=["Alice Liddell", "alice@example.com"])
    e2 = store.register_subject("alice", tenant="acme", identifiers=["Alice Liddell"])
    assert e2 > e1 > 0
    assert text_of(store, "n1") == "Alice Liddell wrote in"
    with pytest.raises(efface.InvalidInput):
        store.register_subject("alice", tenant="acme", identifiers="Alice Liddell")
    assert store.stats()["epoch"] == e2


# -- receipts ----------------------------------------------------------------------------------
@pytest.mark.ann_files("asserts a propagation bound above 0 s")
def test_receipt_to_dict_has_every_field_of_the_contract(store, clock):
    put(store, "n1", "kept for audit", purpose="support")
    store.retain("n1", tenant="acme", subject="alice", purpose="audit", basis="legal_hold", ttl=30 * DAY)
    put(store, "n2", "erased note")
    r = store.forget(tenant="acme", subject="alice")
    d = r.to_dict()
    json.dumps(d)  # one JSON document
    for field in (
        "handle",
        "epoch",
        "level",
        "released",
        "erased",
        "retained",
        "quarantined",
        "paths",
        "max_propagation_s",
    ):
        assert field in d, field
    assert d["handle"] == r.handle and d["handle"].startswith("efr_")
    assert d["epoch"] == r.epoch
    assert d["level"] in ("intent", "unreadable", "erased")
    assert d["erased"] == ["n2"]
    assert d["quarantined"] == []
    assert sorted(x["key"] for x in d["released"]) == ["n1", "n2"]
    (ret,) = d["retained"]
    assert {"key", "purpose", "basis", "expires_at"} <= set(ret)
    assert (ret["key"], ret["purpose"], ret["basis"]) == ("n1", "audit", "legal_hold")
    assert ret["expires_at"] == pytest.approx(clock() + 30 * DAY)
    assert set(d["paths"]) == {"origin", "fts", "ann"}
    for p in d["paths"].values():
        assert {"state", "applied_epoch"} <= set(p)
        assert p["state"] in ("absorbed", "pending", "refused")
    assert d["max_propagation_s"] == max(p["max_propagation_s"] for p in d["paths"].values())
    assert d["max_propagation_s"] > 0


# -- opening -----------------------------------------------------------------------------------
def test_reopening_a_hashing_store_with_minilm_is_refused(store, open_store, reopen, backend):
    if backend in ("memory", "http"):
        pytest.skip(f"{backend}: the embedder check reads what a reopen of the origin finds (memory: nothing persists)")
    put(store, "n1", "a note")
    path = store.path
    store.close()
    with pytest.raises(efface.EmbedderMismatch):
        open_store(path, embedder="minilm")
    # The refused open released the lock and changed nothing.
    again = open_store(path, embedder=None)
    assert again.embedder.name == "hashing-384"
    assert text_of(again, "n1") == "a note"


_OPEN_IN_CHILD = textwrap.dedent(
    """
    import sys
    import efface
    try:
        efface.open(sys.argv[1], embedder="hashing", background=False).close()
    except efface.StoreLocked:
        sys.exit(3)
    """
)


def _open_in_child(path):
    return subprocess.run(
        [sys.executable, "-c", _OPEN_IN_CHILD, path],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_a_second_process_cannot_open_an_open_store(store):
    if on_postgres(store):
        pytest.skip("postgres origin: any number of processes share one database (the test below)")
    put(store, "n1", "a note")
    locked = _open_in_child(store.path)
    assert locked.returncode == 3, locked.stderr
    with pytest.raises(efface.StoreLocked):  # a second handle in this process, too
        efface.open(store.path, embedder="hashing", background=False)
    assert text_of(store, "n1") == "a note"
    store.close()
    free = _open_in_child(store.path)
    assert free.returncode == 0, free.stderr


_OPEN_PG_IN_CHILD = textwrap.dedent(
    """
    import os
    import sys
    import efface
    # the URL comes in the environment, never on a command line (ps shows those to every user)
    url, kek, cache = os.environ["EFFACE_TEST_URL"], os.environ["EFFACE_KEK_FILE"], sys.argv[1] or None
    try:
        s = efface.open(url, embedder="hashing", background=False, cache_dir=cache)
    except efface.StoreLocked:
        sys.exit(3)
    with s:
        m = s.read("n1", tenant="acme", purpose="support")
        print(m.text if m is not None else "<none>")
        s.write("n2", "a note from the second process", tenant="acme", subject="alice", purpose="support")
    """
)


def test_a_second_process_shares_an_open_postgres_store_but_not_its_cache_directory(store, tmp_path):
    """On PostgreSQL nothing locks the database: a second process on the same URL opens the
    store while the first has it open, reads what the first wrote and writes what the first
    then reads. What one process holds is its cache directory (``store.path``): another process
    naming the same one gets StoreLocked, as a second handle in this process does, until the
    first closes."""
    if not on_postgres(store):
        pytest.skip("the PostgreSQL origin's sharing (an embedded store's directory is one process's: above)")
    origin = behind(store)._origin
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "EFFACE_TEST_URL": origin._pool.conninfo,
        "EFFACE_KEK_FILE": os.fspath(origin._keys.file.path),
        "XDG_CACHE_HOME": os.fspath(tmp_path / "xdg-cache"),  # the child's own cache directory, removed at close
    }

    def child(cache_dir: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", _OPEN_PG_IN_CHILD, cache_dir], capture_output=True, text=True, timeout=120, env=env
        )

    put(store, "n1", "a note")
    locked = child(store.path)  # the first process's cache directory
    assert locked.returncode == 3, locked.stderr
    with pytest.raises(efface.StoreLocked):  # a second handle in this process on it, too
        efface.open(origin._pool.conninfo, embedder="hashing", background=False, cache_dir=store.path)
    assert text_of(store, "n1") == "a note" and text_of(store, "n2") is None
    shared = child("")  # the same database, a cache directory of its own
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout.strip() == "a note"  # it saw the first process's write
    assert text_of(store, "n2") == "a note from the second process"  # and the first sees its write
    assert not any((tmp_path / "xdg-cache").rglob("efface.lock"))  # its own directory, removed at close
    store.close()
    free = child(store.path)  # closed: the cache directory is free again
    assert free.returncode == 0, free.stderr
    assert free.stdout.strip() == "a note"


def test_closed_store_refuses_calls(store):
    put(store, "n1", "a note")
    store.close()
    store.close()  # idempotent
    with pytest.raises(efface.EffaceError):
        store.read("n1", tenant="acme", purpose="support")
    with pytest.raises(efface.EffaceError):
        put(store, "n2", "another")
    with pytest.raises(efface.EffaceError, match="closed"):  # was accepted, and never called
        store.on_quarantine(lambda receipt, items: None)


def test_context_manager_closes(store_path, clock):
    with efface.open(store_path, embedder="hashing", background=False, clock=clock) as s:
        put(s, "n1", "a note")
    with pytest.raises(efface.EffaceError):
        s.read("n1", tenant="acme", purpose="support")
    with efface.open(store_path, embedder="hashing", background=False, clock=clock) as s2:
        assert text_of(s2, "n1") == "a note"


def test_sweep_gives_one_expiry_receipt_per_tenant(store, clock):
    put(store, "a", "acme short-lived", tenant="acme", ttl=10)
    put(store, "b", "globex short-lived", tenant="globex", ttl=10)
    put(store, "c", "globex long-lived", tenant="globex", ttl=1000)
    clock.advance(11)
    receipts = store.sweep()
    assert sorted((r.selector.tenant, r.erased) for r in receipts) == [("acme", ("a",)), ("globex", ("b",))]
    assert len({r.epoch for r in receipts}) == 2
    assert [row["handle"] for row in store.receipts(tenant="globex")] == [
        r.handle for r in receipts if r.selector.tenant == "globex"
    ]
    assert text_of(store, "c", tenant="globex") == "globex long-lived"


def test_a_write_in_one_tenant_honours_due_expiries_everywhere_first(store, clock):
    put(store, "a", "acme short-lived", tenant="acme", ttl=10)
    clock.advance(11)
    epoch = put(store, "g", "globex note", tenant="globex")
    (row,) = store.receipts(tenant="acme")
    assert row["kind"] == "expire" and row["epoch"] < epoch
    assert store.stats()["records"] == 1


def test_status_and_memory_serialise_to_json(store):
    put(store, "n1", "one")
    r = store.forget(tenant="acme", key="n1")
    d = store.status(r.handle).to_dict()
    assert json.loads(json.dumps(d))["handle"] == r.handle
    assert {"level", "paths", "settled", "pending_deletions", "counts"} <= set(d)


def test_a_tenants_ledger_holds_only_its_own_entries(store):
    put(store, "a1", "acme note")
    put(store, "g1", "globex note", tenant="globex")
    ra = store.forget(tenant="acme", key="a1")
    rg = store.forget(tenant="globex", key="g1")
    store.set_policy("globex", "redact")
    acme, globex = store.ledger("acme"), store.ledger("globex")
    assert [e["handle"] for e in acme] == [ra.handle]
    assert [e["handle"] for e in globex] == [rg.handle, None]
    assert [e["kind"] for e in globex] == ["forget", "policy"]
    assert store.verify_ledger().ok  # the chain is checked whole


@pytest.mark.parametrize(
    "dsn",
    [
        "user=postgres dbname=agents host=127.0.0.1 port=5432",
        "host=db.internal password=Secret-9 dbname=m",
        " DBNAME=x",
    ],
)
def test_a_libpq_connection_string_is_refused_not_taken_for_a_directory(tmp_path, monkeypatch, dsn):
    """A keyword/value connection string once opened a SQLite store in a directory named after
    it (a bench left one in the repository): it is refused with what to pass instead, never
    echoed (it may hold a password), and nothing is created."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(efface.InvalidInput, match="postgresql://") as e:
        efface.open(dsn, embedder="hashing")
    assert "Secret-9" not in str(e.value) and "127.0.0.1" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
    # a directory whose name merely holds '=' further on is still a directory
    with efface.open(tmp_path / "notes=v2", embedder="hashing", background=False) as store:
        assert store.stats() is not None


def test_a_failed_compactor_round_is_logged_by_type_only(store_path, caplog):
    """A compactor round that raised was logged with its traceback, whose last line is the
    exception's message: it can quote data (here a key). Now its type only, as every other
    log line of efface; the worker lives on and the next round retries."""
    import logging
    import threading

    with efface.open(store_path, embedder="hashing", compact_interval=0.01) as s:
        failed = threading.Event()
        expire = s._compactor._expire

        def once():
            if not failed.is_set():
                failed.set()
                raise ValueError("no claim for key alice@example.com:diary")
            expire()

        with caplog.at_level(logging.ERROR, logger="efface"):
            s._compactor._expire = once
            s._compactor.wake()
            assert failed.wait(30)
            s.write("k1", "Alice prefers tea", tenant="acme", subject="alice", purpose="support")
            s.wait(s.forget(tenant="acme", key="k1").handle, timeout=30, until="absorbed")  # rounds go on
    assert any("compactor round failed (ValueError)" in r.getMessage() for r in caplog.records)
    assert "alice@example.com" not in caplog.text and all(r.exc_info is None for r in caplog.records)
