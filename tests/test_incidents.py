"""The two incidents of docs/concepts.md §1, replayed against efface.

Incident A: forget(subject) acknowledged while the vector index still held the subject's
vectors, and recall served them. In efface the acknowledgement is read-safe at once.

Incident B: a key lived under two retention scopes; the forget cleared one and the value
was still served from other paths. In efface the receipt says what is still held and why,
and once the last scope is released nothing is served through any path.
"""

from __future__ import annotations

import itertools

import pytest

from conftest import ann_vectors, fts_ids, on_postgres

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

DAY = 86_400.0
TENANT = "acme"


def _pseudo_words(n: int) -> list[str]:
    """n distinct made-up words, so each record has words only it contains."""
    syll = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze"]
    return ["".join(p) for p in itertools.islice(itertools.product(syll, repeat=3), n)]


def _hits(store, query, purpose, k=1000, subject=None):
    return store.recall(query, tenant=TENANT, purpose=purpose, subject=subject, k=k)


# -- Incident A ------------------------------------------------------------------------------
N_ALICE = 50  # the incident had 412; 50 keeps the test fast and exercises the same paths


@pytest.fixture
def incident_a(store):
    words = _pseudo_words(2 * N_ALICE + 10)
    alice = {f"acme:alice:{i}": f"alice said {words[2 * i]} about the {words[2 * i + 1]} order" for i in range(N_ALICE)}
    store.register_subject("alice", tenant=TENANT, identifiers=["Alice", "alice@example.com"])
    store.write_many(
        [{"key": k, "text": t} for k, t in alice.items()], tenant=TENANT, subject="alice", purpose="support"
    )
    bob = {f"acme:bob:{i}": f"bob said {words[2 * N_ALICE + i]} about the order" for i in range(5)}
    store.write_many([{"key": k, "text": t} for k, t in bob.items()], tenant=TENANT, subject="bob", purpose="support")
    # The rolling digest, written under the tenant's service account, naming Alice.
    digest = "weekly digest: Alice asked twice about her refund and the order status"
    store.write(
        "acme:digest:w14",
        digest,
        tenant=TENANT,
        subject="svc-analytics",
        purpose="analytics",
        sources=sorted(alice)[:3],
    )
    return store, alice, bob, digest


def test_incident_a_forget_subject_is_read_safe_at_acknowledgement(incident_a):
    store, alice, bob, _ = incident_a
    # Before: every alice record is recallable by its text, through both indexes.
    for key, text in list(alice.items())[:5]:
        hit = next(h for h in _hits(store, text, "support") if h.key == key)
        assert set(hit.via) == {"ann", "fts"}
    ann_size = ann_vectors(store, TENANT)

    receipt = store.forget(tenant=TENANT, subject="alice")
    assert sorted(receipt.erased) == sorted(alice)
    assert len(receipt.released) == N_ALICE
    assert receipt.retained == ()
    # The vector index has not absorbed the erasure: it still holds every vector ...
    # (on PostgreSQL the vectors leave the database's index in the forget's own transaction)
    if on_postgres(store):
        assert receipt.paths["ann"].state == "absorbed" and ann_vectors(store, TENANT) == ann_size - N_ALICE
    else:
        assert receipt.paths["ann"].state == "pending"
        assert store.status(receipt.handle).paths["ann"].state == "pending"
        assert ann_vectors(store, TENANT) == ann_size
    # ... and still no recall scoped to the tenant, by any erased text, returns any of them.
    erased = set(alice)
    live = {"support": set(bob), "analytics": {"acme:digest:w14"}}
    for purpose in ("support", "analytics"):
        for text in alice.values():
            hits = _hits(store, text, purpose)
            assert {h.key for h in hits} <= live[purpose]
            assert not erased & {h.key for h in hits}
            assert not set(alice.values()) & {h.text for h in hits}
            assert all("alice said" not in h.text for h in hits)
        assert not erased & {h.key for h in _hits(store, "alice said about the order", purpose)}
    for key in alice:
        assert store.read(key, tenant=TENANT, purpose="support") is None
    # Nothing outside the selector went: bob's records are still recalled by their text.
    for key, text in bob.items():
        assert key in [h.key for h in _hits(store, text, "support") if "fts" in h.via]
    if not on_postgres(store):
        assert store.status(receipt.handle).paths["ann"].state == "pending"  # the probes above were real

    st = store.wait(receipt.handle, timeout=30)
    assert st.settled and st.pending_deletions == 0
    assert ann_vectors(store, TENANT) == ann_size - N_ALICE
    for text in list(alice.values())[:10]:
        assert not erased & {h.key for h in _hits(store, text, "support")}


def test_incident_a_erasure_stays_read_safe_across_a_restart(incident_a, reopen):
    store, alice, _, _ = incident_a
    _hits(store, "warm the vector index", "support")
    receipt = store.forget(tenant=TENANT, subject="alice")
    store = reopen(store)
    for text in list(alice.values())[:10]:
        assert not set(alice) & {h.key for h in _hits(store, text, "support")}
    assert store.status(receipt.handle).settled


def test_incident_a_digest_under_another_subject_is_quarantined(incident_a):
    store, alice, _, digest = incident_a
    receipt = store.forget(tenant=TENANT, subject="alice")
    # Policy-correct: another subject's claim keeps the digest, so it is not erased ...
    assert "acme:digest:w14" not in receipt.erased
    assert all(r.key != "acme:digest:w14" for r in receipt.released)
    # ... and read-correct: it was built from Alice's records (lineage) and names her
    # (mention), so the forget enumerates it, quarantines it, and says so (invariant 4).
    assert receipt.quarantined == ("acme:digest:w14",)
    (d,) = receipt.derivations
    assert (d.key, d.why, d.action) == ("acme:digest:w14", "lineage+mention", "quarantined")
    assert store.status(receipt.handle).counts["quarantined"] == 1
    assert store.read("acme:digest:w14", tenant=TENANT, purpose="analytics") is None
    assert "acme:digest:w14" not in [h.key for h in _hits(store, "alice", "analytics")]
    assert "acme:digest:w14" not in [h.key for h in _hits(store, digest, "analytics")]
    (item,) = store.quarantined(tenant=TENANT)
    assert item.key == "acme:digest:w14" and item.handle == receipt.handle
    # Its three sources were erased: the lineage keeps the erasure's handle, never their keys.
    assert item.sources == ("erased:" + receipt.handle,) and not set(item.sources) & set(alice)
    assert item.surviving_sources == ()
    # Re-derived without her, it is served again.
    store.rederive("acme:digest:w14", "week 14: three support calls about tea", tenant=TENANT, sources=[])
    m = store.read("acme:digest:w14", tenant=TENANT, purpose="analytics")
    assert m is not None and m.text == "week 14: three support calls about tea"
    assert store.quarantined(tenant=TENANT) == []


def test_incident_a_digest_that_only_names_her_is_found_by_mention(store):
    store.register_subject("alice", tenant=TENANT, identifiers=["Alice Martin", "alice@example.com"])
    store.write("acme:t:1", "Alice Martin asked about her order", tenant=TENANT, subject="alice", purpose="support")
    digest = "Digest: ALICE MARTIN (alice@Example.com) called about an order twice"
    store.write("acme:digest", digest, tenant=TENANT, subject="svc", purpose="analytics")  # no sources
    store.write("acme:other", "Digest: Bob called about invoices", tenant=TENANT, subject="svc", purpose="analytics")
    assert "acme:digest" in [h.key for h in _hits(store, "alice", "analytics")]
    receipt = store.forget(tenant=TENANT, subject="alice")
    assert receipt.quarantined == ("acme:digest",)
    assert receipt.derivations[0].why == "mention"
    assert receipt.identifiers_erased
    for query in ("alice", "Alice Martin", "alice@example.com", digest):
        assert "acme:digest" not in [h.key for h in _hits(store, query, "analytics")]
    assert "acme:other" in [h.key for h in _hits(store, "Bob invoices", "analytics")]


# -- Incident B ------------------------------------------------------------------------------
PREFIX = "tenant:acme:session:"
KEY = PREFIX + "42"
SECRET = "caller read out card ending 4242 and the address 221B Baker Street"


@pytest.fixture
def incident_b(store, clock):
    store.write(KEY, SECRET, tenant=TENANT, subject="alice", purpose="tenant-retention", basis="contract", ttl=30 * DAY)
    store.retain(KEY, tenant=TENANT, subject="alice", purpose="session", basis="consent", ttl=7 * DAY)
    store.write(
        PREFIX + "43",
        "session 43: caller asked for opening hours",
        tenant=TENANT,
        subject="alice",
        purpose="session",
        ttl=7 * DAY,
    )
    # Keys that share only part of the prefix, and an unrelated one: never touched.
    bystanders = {
        "tenant:acme:session": ("bare prefix without colon", "session"),
        "tenant:acme:sessions:1": ("plural sessions key", "session"),
        "tenant:acme:billing:1": ("invoice 77 paid", "tenant-retention"),
        "tenant:globex:session:42": ("globex session note", "session"),
    }
    for k, (t, p) in bystanders.items():
        store.write(k, t, tenant=TENANT, subject="alice", purpose=p)
    store.write(KEY, "another tenant's session 42", tenant="globex", subject="alice", purpose="session")
    return store, clock(), bystanders


def _served_anywhere(store, *, key=KEY, text=SECRET):
    """Every way the store can hand out this record, for every purpose, or [] if none."""
    found = []
    for purpose in ("session", "tenant-retention"):
        if store.read(key, tenant=TENANT, purpose=purpose) is not None:
            found.append(("read", purpose))
        # listing-like: everything recall will give for the prefix's words and a broad query
        for query in (PREFIX, "tenant acme session", text, "callrs cardz adresses streetz"):
            for h in _hits(store, query, purpose):
                if h.key == key or h.text == text or "4242" in h.text:
                    found.append((",".join(h.via), purpose, query))
    return found


def _fts_rows(store, word):
    """Rows of the full-text index that hold ``word`` (read from the index itself)."""
    return fts_ids(store, word)


def test_incident_b_two_retention_scopes(incident_b):
    store, t0, bystanders = incident_b
    # The vector path alone finds it by meaning-ish similarity (no shared word with the text).
    vec = [h for h in _hits(store, "callrs cardz adresses streetz", "session") if h.key == KEY]
    assert vec and vec[0].via == ("ann",)
    ann_size = ann_vectors(store, TENANT)

    r1 = store.forget(tenant=TENANT, prefix=PREFIX, purpose="session")
    assert sorted((x.key, x.purpose) for x in r1.released) == [(PREFIX + "42", "session"), (PREFIX + "43", "session")]
    assert r1.erased == (PREFIX + "43",)
    (kept,) = r1.retained
    assert (kept.key, kept.purpose, kept.basis) == (KEY, "tenant-retention", "contract")
    assert kept.expires_at == pytest.approx(t0 + 30 * DAY)
    assert r1.to_dict()["retained"][0]["expires_at"] == pytest.approx(t0 + 30 * DAY)
    # The session scope no longer serves it; the tenant-retention scope still does, as the receipt says.
    assert store.read(KEY, tenant=TENANT, purpose="session") is None
    assert not [f for f in _served_anywhere(store) if f[-1] == "session" or f[1:2] == ("session",)]
    assert store.read(KEY, tenant=TENANT, purpose="tenant-retention").text == SECRET

    r2 = store.forget(tenant=TENANT, prefix=PREFIX, purpose="tenant-retention")
    assert r2.erased == (KEY,) and r2.retained == ()
    assert r2.epoch > r1.epoch
    # After the acknowledgement: no point read, no listing-like recall, no FTS, no vector hit.
    assert _served_anywhere(store) == []
    assert _fts_rows(store, "4242") == [] and _fts_rows(store, "baker") == []
    if not on_postgres(store):  # (there the vectors left the database's index with the forget)
        assert r2.paths["ann"].state == "pending" and ann_vectors(store, TENANT) == ann_size
    st = store.wait(r2.handle, timeout=30)
    assert st.settled
    assert ann_vectors(store, TENANT) == ann_size - 2
    assert _served_anywhere(store) == []
    # Nothing outside the selector was lost.
    for k, (t, p) in bystanders.items():
        assert store.read(k, tenant=TENANT, purpose=p).text == t
    assert store.read(KEY, tenant="globex", purpose="session").text == "another tenant's session 42"


def test_incident_b_legal_hold_is_named_not_silently_kept(store):
    """A third scope under legal_hold survives a forget that does not name it, and the
    receipt says so; naming its purpose releases it."""
    store.write(KEY, SECRET, tenant=TENANT, subject="alice", purpose="session")
    store.retain(KEY, tenant=TENANT, subject="alice", purpose="litigation", basis="legal_hold")
    r = store.forget(tenant=TENANT, prefix=PREFIX)
    assert r.erased == ()
    (kept,) = r.retained
    assert (kept.key, kept.purpose, kept.basis, kept.expires_at) == (KEY, "litigation", "legal_hold", None)
    assert "legal_hold" in kept.reason
    assert store.read(KEY, tenant=TENANT, purpose="session") is None
    r = store.forget(tenant=TENANT, prefix=PREFIX, purpose="litigation")
    assert r.erased == (KEY,)
    assert store.read(KEY, tenant=TENANT, purpose="litigation") is None
