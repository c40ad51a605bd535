"""A subject's identifiers go with its last claim in the tenant, whatever removed it
(docs/concepts.md §8), and free-text reasons never sit in the append-only ledger in clear.

* A forget by key, prefix or purpose, or a TTL expiry (an explicit ``sweep``, the sweep
  every mutation does first, or the background compactor's), that leaves a subject with no
  claim in the tenant erases its registered identifiers in the same transaction: the
  receipt says so (``identifiers_erased``, ``subjects_erased``), mention detection forgets
  them, ``verify`` fingerprints them and proves them gone from every file, and the raw bytes
  of the store agree.
* A subject that keeps a claim (another key, a retained legal hold) keeps its identifiers.
* ``release(reason=)`` and ``set_policy(reason=)`` commit only a keyed hash of the reason
  to the ledger; the text lives beside what it concerns and goes with it.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import behind, ledger_rows

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

T = "acme"
ZQ = "zq-subject"
ZQ_IDS = ["Zebulon Quaxworth", "ZQ.Quax@Quaxmail.example", "+1 212 555 0188"]
ZQ_BYTES = ["Zebulon Quaxworth", "Quaxworth", "ZQ.Quax@Quaxmail.example", "quaxmail", "+1 212 555 0188"]
"""What must be gone from every file once ZQ's identifiers are erased (case-insensitive)."""
BOB = "bob-subject"
BOB_IDS = ["Bertram Ollivander"]

HOWS = ("key", "prefix", "purpose", "sweep", "write_sweeps", "expiry")


def scan_files(directory, needles) -> dict[str, list[str]]:
    """needle -> files under ``directory`` whose raw bytes hold it (case-insensitive)."""
    found: dict[str, list[str]] = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read().lower()
            for needle in needles:
                if needle.lower().encode() in data:
                    found.setdefault(needle, []).append(os.path.relpath(os.path.join(root, name), directory))
    return found


def registered(store, tenant=T) -> dict[str, list[str]]:
    """subject -> identifiers the origin holds for ``tenant`` (behind the API, either backend)."""
    store = behind(store)
    tid = store._tenant(tenant)  # the origin knows a tenant by its id (a keyed hash)
    return {s: json.loads(i) for t, s, i in store._origin.all_subjects() if t == tid}


def _open(open_store, how):
    """A store for ``how``: the background compactor runs only where it does the expiry."""
    return open_store(background=True, compact_interval=0.05) if how == "expiry" else open_store()


def _world(store, ttl=None):
    """ZQ, registered, with one record of their own; BOB with a record of theirs."""
    store.register_subject(ZQ, tenant=T, identifiers=ZQ_IDS)
    store.register_subject(BOB, tenant=T, identifiers=BOB_IDS)
    store.write("zq:1", "my parcel came late, refund please", tenant=T, subject=ZQ, purpose="support", ttl=ttl)
    store.write("bob:1", "bob prefers the evening slot", tenant=T, subject=BOB, purpose="billing")


def _remove_last_claim(store, clock, how):
    """Remove ZQ's only claim by ``how``; returns that erasure's receipt (as the caller
    sees it for forgets and sweeps, as stored for the implicit expiries)."""
    if how == "key":
        return store.forget(tenant=T, key="zq:1")
    if how == "prefix":
        return store.forget(tenant=T, prefix="zq:")
    if how == "purpose":
        return store.forget(tenant=T, purpose="support")
    clock.advance(61)
    if how == "sweep":
        (receipt,) = store.sweep()
        return receipt
    if how == "write_sweeps":  # every mutation honours due expiries first
        store.write("bob:2", "bob again, about the slot", tenant=T, subject=BOB, purpose="billing")
    elif how == "expiry":  # the background compactor's own sweep (the store runs one)
        deadline = time.monotonic() + 60
        while not [r for r in store.receipts(T) if r["kind"] == "expire"] and time.monotonic() < deadline:
            behind(store)._compactor.wake()
            time.sleep(0.01)
    (row,) = [r for r in store.receipts(T) if r["kind"] == "expire"]
    return row


def _field(receipt, name):
    return receipt[name] if isinstance(receipt, dict) else getattr(receipt, name)


def _handle(receipt):
    return receipt["handle"] if isinstance(receipt, dict) else receipt.handle


@pytest.mark.parametrize("how", HOWS)
def test_the_last_claim_takes_the_identifiers_whatever_removed_it(open_store, clock, how):
    store = _open(open_store, how)
    _world(store, ttl=None if how in ("key", "prefix", "purpose") else 60)
    receipt = _remove_last_claim(store, clock, how)
    body = receipt["body"] if isinstance(receipt, dict) else None
    if body is None:
        assert receipt.erased == ("zq:1",)
        assert receipt.identifiers_erased and receipt.subjects_erased == (ZQ,)
        assert receipt.to_dict()["subjects_erased"] == [ZQ]
    else:  # the stored receipt: keyed hashes only
        assert body["identifiers_erased"] and len(body["subjects_erased"]) == 1
        assert ZQ not in json.dumps(body)
    assert set(registered(store)) == {BOB}, "ZQ's registration outlived their last claim"
    # Mention detection has forgotten them: a later note naming them is no mention of anyone.
    store.write("note", "Zebulon Quaxworth called about the refund", tenant=T, subject=BOB, purpose="billing")
    later = store.forget(tenant=T, subject=ZQ)
    assert later.derivations == () and store.read("note", tenant=T, purpose="billing") is not None
    # verify fingerprinted the identifiers and proves them gone like the text.
    store.wait(_handle(receipt), timeout=30)
    v = store.verify(_handle(receipt))
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    (byte_check,) = [c for c in v.checks if c.name == "bytes"]
    assert "identifier" in byte_check.detail


@pytest.mark.sqlite_only(reason="scans the bytes of the origin's files")
@pytest.mark.parametrize("how", HOWS)
def test_verify_says_erased_only_once_the_identifiers_bytes_are_gone(open_store, store_path, clock, how):
    store = _open(open_store, how)
    _world(store, ttl=None if how in ("key", "prefix", "purpose") else 60)
    assert set(scan_files(store_path, ZQ_BYTES)) == set(ZQ_BYTES)  # the scan finds what is there
    receipt = _remove_last_claim(store, clock, how)
    store.wait(_handle(receipt), timeout=30)
    v = store.verify(_handle(receipt))
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    store.close()
    assert scan_files(store_path, ZQ_BYTES) == {}, "verify said erased; the identifiers' bytes remain"
    # BOB kept a claim: BOB's identifiers stay.
    assert set(scan_files(store_path, BOB_IDS)) == set(BOB_IDS)


def test_a_subject_with_another_claim_keeps_its_identifiers(store):
    _world(store)
    store.write("zq:2", "also asked about gift wrap", tenant=T, subject=ZQ, purpose="support")
    first = store.forget(tenant=T, key="zq:1")
    assert first.erased == ("zq:1",) and not first.identifiers_erased and first.subjects_erased == ()
    assert registered(store)[ZQ] == sorted(ZQ_IDS)
    # Still a registered subject: a note naming them is found at their forget.
    store.write("note", "Zebulon Quaxworth called", tenant=T, subject=BOB, purpose="billing")
    last = store.forget(tenant=T, prefix="zq:")
    assert last.erased == ("zq:2",) and last.subjects_erased == (ZQ,)
    assert ZQ not in registered(store)


def test_a_retained_legal_hold_keeps_the_identifiers_until_it_goes(store):
    _world(store)
    store.retain("zq:1", tenant=T, subject=ZQ, purpose="audit", basis="legal_hold")
    held = store.forget(tenant=T, key="zq:1")
    assert held.erased == () and [(r.purpose, r.basis) for r in held.retained] == [("audit", "legal_hold")]
    assert not held.identifiers_erased and ZQ in registered(store)
    last = store.forget(tenant=T, purpose="audit")
    assert last.erased == ("zq:1",) and last.subjects_erased == (ZQ,) and ZQ not in registered(store)


def test_one_forget_takes_every_subject_it_leaves_bare_and_no_other(store):
    _world(store)
    store.register_subject("carol", tenant=T, identifiers=["Caroline Quintessa"])  # no claim at all
    store.retain("zq:1", tenant=T, subject=BOB, purpose="support", basis="consent")
    store.write("other:1", "unrelated", tenant="globex", subject=ZQ, purpose="support")
    store.register_subject(ZQ, tenant="globex", identifiers=ZQ_IDS)
    receipt = store.forget(tenant=T, purpose="support")
    # BOB keeps bob:1 (billing): only ZQ is left bare in this tenant.
    assert receipt.subjects_erased == (ZQ,)
    assert set(registered(store)) == {BOB, "carol"}
    assert set(registered(store, "globex")) == {ZQ}, "another tenant's registration is not this forget's"
    receipt = store.forget(tenant=T, key="bob:1")
    assert receipt.subjects_erased == (BOB,) and set(registered(store)) == {"carol"}


def test_the_mention_matcher_is_rebuilt_without_them_after_a_reopen(open_store, reopen):  # reopen skips memory
    store = open_store()
    _world(store)
    store.forget(tenant=T, key="zq:1")
    store = reopen(store)
    store.write("note", "Zebulon Quaxworth called", tenant=T, subject=BOB, purpose="billing")
    assert store.forget(tenant=T, subject=ZQ).derivations == ()
    assert store.verify_ledger().ok


# -- free-text reasons ---------------------------------------------------------------------------
REASON = "Zebulon Quaxworth agreed by phone on 2027-03-02"
KEEP_REASON = "aggregates kept under the Quaxworth audit agreement"


def _quarantined_note(store):
    store.register_subject(ZQ, tenant=T, identifiers=ZQ_IDS)
    store.write("zq:1", "my parcel came late", tenant=T, subject=ZQ, purpose="support")
    store.write("note", "Zebulon Quaxworth called twice", tenant=T, subject=BOB, purpose="billing")
    store.forget(tenant=T, subject=ZQ)
    assert [i.key for i in store.quarantined(tenant=T)] == ["note"]


def _ledger_text(store) -> str:
    return json.dumps(store.ledger()) + json.dumps(ledger_rows(store))


def test_reasons_are_in_the_ledger_only_as_keyed_hashes(store):
    _quarantined_note(store)
    store.release("note", tenant=T, reason=REASON)
    store.set_policy(T, "keep", reason=KEEP_REASON)
    text = _ledger_text(store)
    assert "Quaxworth" not in text and "agreed" not in text and "aggregates" not in text
    kinds = {e["kind"]: json.loads(e["body"]) for e in store.ledger()}
    for kind in ("release", "policy"):
        assert "reason" not in kinds[kind] and isinstance(kinds[kind]["reason_h"], str)
    assert kinds["release"]["reason_h"] != kinds["policy"]["reason_h"]
    assert store.verify_ledger().ok
    # The policy's reason still explains what a forget keeps (it lives, erasably, in the store).
    store.write("zq:2", "hello again", tenant=T, subject=ZQ, purpose="support")
    store.write("digest", "digest of zq:2", tenant=T, subject=BOB, purpose="billing", sources=["zq:2"])
    receipt = store.forget(tenant=T, key="zq:2")
    assert [d.detail for d in receipt.derivations] == [f"tenant policy keep: {KEEP_REASON}"]
    assert KEEP_REASON not in _ledger_text(store)
    # A policy without a reason commits to none.
    store.set_policy(T, "quarantine")
    assert json.loads(store.ledger()[-1]["body"])["reason_h"] is None


def test_the_reason_hash_is_keyed_and_tells_equal_reasons(store, open_store, tmp_path):
    _quarantined_note(store)
    store.set_policy(T, "keep", reason=KEEP_REASON)
    store.set_policy(T, "keep", reason=KEEP_REASON)
    a, b = (json.loads(e["body"])["reason_h"] for e in store.ledger()[-2:])
    assert a == b  # an auditor who is shown the text can check it against the ledger
    other = open_store(tmp_path / "other")
    other.write("x", "y", tenant=T, subject=BOB, purpose="billing")
    other.set_policy(T, "keep", reason=KEEP_REASON)
    assert json.loads(other.ledger()[-1]["body"])["reason_h"] != a, "the hash must be keyed per store"


@pytest.mark.sqlite_only(reason="scans the bytes of the origin's files")
def test_a_release_reason_goes_with_the_record_it_released(open_store, store_path):
    store = open_store()
    _quarantined_note(store)
    store.release("note", tenant=T, reason=REASON)
    store.compact()
    assert set(scan_files(store_path, [REASON])) == {REASON}  # kept, erasably, while the record lives
    receipt = store.forget(tenant=T, key="note")
    assert receipt.erased == ("note",)
    store.wait(receipt.handle, timeout=30)
    v = store.verify(receipt.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    assert "reason" in next(c for c in v.checks if c.name == "bytes").detail
    store.close()
    assert scan_files(store_path, [REASON, "agreed by phone"]) == {}
    store = open_store()
    assert store.verify_ledger().ok


@pytest.mark.sqlite_only(reason="scans the bytes of the origin's files")
def test_a_policy_reason_goes_when_the_policy_is_replaced(open_store, store_path):
    store = open_store()
    store.write("x", "y", tenant=T, subject=BOB, purpose="billing")
    store.set_policy(T, "keep", reason=KEEP_REASON)
    store.compact()
    assert set(scan_files(store_path, [KEEP_REASON])) == {KEEP_REASON}
    store.set_policy(T, "quarantine")
    store.compact()
    store.close()
    assert scan_files(store_path, [KEEP_REASON, "audit agreement"]) == {}
    store = open_store()
    assert store.verify_ledger().ok


def test_a_policy_reason_goes_with_the_tenant(open_store, store_path, backend):
    """A policy's reason is free text about the tenant (it may name anyone): it is no
    subject's, so a forget by subject leaves it; it goes, fingerprinted and proven by
    verify, with the tenant's last record, subject and data key, when the tenant's name
    goes too. The policy then reverts to the default (quarantine), the one that fails closed."""
    store = open_store()
    _world(store)
    store.set_policy(T, "keep", reason=KEEP_REASON)
    assert store.forget(tenant=T, subject=ZQ).policy == "keep"
    receipt = store.forget(tenant=T, everything=True)
    assert receipt.erased == ("bob:1",)
    store.wait(receipt.handle, timeout=30)
    v = store.verify(receipt.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    (byte_check,) = [c for c in v.checks if c.name == "bytes"]
    assert "reason" in byte_check.detail
    # the tenant starts afresh under the default policy: a mention is quarantined, not kept
    store.register_subject(ZQ, tenant=T, identifiers=ZQ_IDS)
    store.write("zq:1", "my parcel came late", tenant=T, subject=ZQ, purpose="support")
    store.write("note", "Zebulon Quaxworth called twice", tenant=T, subject=BOB, purpose="billing")
    assert store.forget(tenant=T, subject=ZQ).quarantined == ("note",)
    store.close()
    if backend == "sqlite":
        assert scan_files(store_path, [KEEP_REASON, "audit agreement"]) == {}
        store = open_store()
        assert store.verify_ledger().ok


# -- the byte scan sees an identifier at every alignment --------------------------------------------
@pytest.mark.parametrize("item", ["+1 415 555 0142", "+1 212 555 0188", "0000 1111 2222 3", "Zebulon Quaxworth"])
def test_the_byte_scan_finds_an_identifier_at_every_alignment(tmp_path, item):
    """Windows of few distinct bytes are skipped by the scan; a phone number has several, and
    a copy of "+1 415 555 0142" at five of eight alignments was met by no window (the state
    machine saw verify say erased with it on disk). Every alignment must be covered, or the
    item counted as not checkable."""
    from efface.erasure.fingerprint import Fingerprinter, Fingerprints

    fingerprinter = Fingerprinter(os.urandom(32))
    fp = Fingerprints()
    fingerprinter.add(fp, "identifier", item.encode())
    assert fp.too_short == {}
    for shift in range(8):
        path = tmp_path / f"file{shift}"
        path.write_bytes(b"\x01" * (64 + shift) + item.encode() + b"\x02" * 64)
        hits, _ = fingerprinter.scan([os.fspath(path)], fp)
        assert hits, f"a copy at alignment {shift} was not seen"
