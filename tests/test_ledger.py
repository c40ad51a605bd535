"""The erasure ledger (invariant 7): hash-chained, tamper-evident, free of personal data."""

from __future__ import annotations

import json
import os

import apsw

from conftest import behind, ledger_rows, on_postgres, pg_rows, receipt_rows

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

# Values chosen so none of them can appear inside a hex digest or a handle by chance.
TENANT = "tenant-Quokka-Wharf"
SUBJECTS = ("subject-Zelda-Nyquist", "subject-Quentin-Pryor")
KEY_PREFIX = "memkey:Kowalski:"
TEXT_WORD = "xylophonist"


def _populate(store, clock):
    """Several erasures of every kind; returns the receipts and every identifying string."""
    keys = [f"{KEY_PREFIX}{i}" for i in range(6)]
    for i, key in enumerate(keys):
        store.write(
            key,
            f"{TEXT_WORD} memory {i} of {SUBJECTS[i % 2]}",
            tenant=TENANT,
            subject=SUBJECTS[i % 2],
            purpose="support",
            ttl=60 if i == 5 else None,
        )
    store.retain(keys[1], tenant=TENANT, subject=SUBJECTS[0], purpose="audit", basis="legal_hold")
    store.register_subject(SUBJECTS[0], tenant=TENANT, identifiers=["Zelda Nyquist"])
    receipts = [
        store.forget(tenant=TENANT, subject=SUBJECTS[0]),
        store.forget(tenant=TENANT, key=keys[3]),
        store.forget(tenant=TENANT, prefix=KEY_PREFIX, purpose="support"),
    ]
    clock.advance(61)
    receipts += store.sweep()
    secrets = [TENANT, *SUBJECTS, KEY_PREFIX, *keys, TEXT_WORD, "Zelda Nyquist"]
    return receipts, secrets


def _rows(db_path, table):
    conn = apsw.Connection(db_path)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        conn.close()


def _origin_db(store):
    return os.path.join(store.path, "origin.db")


def test_the_chain_verifies_and_holds_one_entry_per_receipt(store, clock):
    receipts, _ = _populate(store, clock)
    check = store.verify_ledger()
    assert check.ok, check.problems
    assert check.entries == len(receipts) == len(store.ledger(TENANT))
    assert [e["handle"] for e in store.ledger(TENANT)] == [r.handle for r in receipts]
    assert [e["seq"] for e in store.ledger(TENANT)] == list(range(1, len(receipts) + 1))


def test_receipt_carries_its_ledger_entry(store, clock):
    receipts, _ = _populate(store, clock)
    by_seq = {e["seq"]: e for e in store.ledger(TENANT)}
    for r in receipts:
        entry = by_seq[r.ledger_seq]
        assert entry["handle"] == r.handle
        assert entry["hash"] == r.ledger_hash
        assert entry["kind"] == r.kind
        assert json.loads(entry["body"])["epoch"] == r.epoch
    prev = "0" * 64
    for e in store.ledger(TENANT):
        assert e["prev"] == prev
        prev = e["hash"]


def _in_memory(store) -> bool:
    return getattr(behind(store)._origin, "physical", None) is None and not on_postgres(store)


def _stored(store, table):
    """Every row the store keeps in ``table`` (``ledger`` or ``receipts``). SQLite: read from
    its file, the store closed first (idempotent); memory: from the origin's state; postgres:
    from its database."""
    if on_postgres(store):
        return [list(e.values()) for e in ledger_rows(store)] if table == "ledger" else receipt_rows(store)
    if _in_memory(store):
        s = behind(store)._origin._state
        rows = (
            [list(e.values()) for e in s.ledger] if table == "ledger" else [[h, *row] for h, row in s.receipts.items()]
        )
        return rows
    path = _origin_db(store)
    store.close()
    return _rows(path, table)


def _tamper(store, reopen, sql, args=(), *, memory=None):
    """Edit the ledger behind the store's back: SQL on the closed SQLite file then a reopen, or
    ``memory(ledger) -> ledger`` on the memory origin's state (which a reopen would lose);
    postgres: the same SQL on its database, then a reopen."""
    if on_postgres(store):
        pg_rows(store, sql.replace("?", "%s").replace(" ledger ", " {s}.ledger "), args)
        return reopen(store)
    if _in_memory(store):
        behind(store)._origin._replace(lambda s: s.ledger.__setitem__(slice(None), memory([dict(e) for e in s.ledger])))
        return store
    path = _origin_db(store)
    store.close()
    conn = apsw.Connection(path)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()
    return reopen(store)


def test_an_altered_entry_body_is_detected(store, clock, reopen):
    receipts, _ = _populate(store, clock)
    entry = store.ledger(TENANT)[1]
    body = json.loads(entry["body"])
    body["erased"] = []  # hide what was erased
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    store = _tamper(
        store,
        reopen,
        "UPDATE ledger SET body=? WHERE seq=?",
        (text, entry["seq"]),
        memory=lambda led: [{**e, "body": text} if e["seq"] == entry["seq"] else e for e in led],
    )
    check = store.verify_ledger()
    assert not check.ok
    assert any(f"seq {entry['seq']}" in p and "altered" in p for p in check.problems), check.problems
    assert check.entries == len(receipts)


def test_an_altered_timestamp_is_detected(store, clock, reopen):
    _populate(store, clock)
    store = _tamper(
        store,
        reopen,
        "UPDATE ledger SET at=at+1 WHERE seq=1",
        memory=lambda led: [{**e, "at": e["at"] + 1} if e["seq"] == 1 else e for e in led],
    )
    check = store.verify_ledger()
    assert not check.ok
    assert any("seq 1" in p for p in check.problems), check.problems


def test_a_rehashed_entry_still_breaks_the_next_link(store, clock, reopen):
    """Rewriting an entry and recomputing its own hash does not help: the next entry's
    link, and the hash the caller kept on the receipt, no longer match."""
    from efface.origin.ledger import chain_hash

    receipts, _ = _populate(store, clock)
    e = store.ledger(TENANT)[0]
    body = e["body"].replace('"kind":"forget"', '"kind":"forgot"')
    assert body != e["body"]
    new_hash = chain_hash(e["prev"], e["seq"], e["at"], e["kind"], e["handle"], body)
    store = _tamper(
        store,
        reopen,
        "UPDATE ledger SET body=?, hash=? WHERE seq=1",
        (body, new_hash),
        memory=lambda led: [{**e, "body": body, "hash": new_hash} if e["seq"] == 1 else e for e in led],
    )
    check = store.verify_ledger()
    assert not check.ok
    assert any("seq 2" in p and "link" in p for p in check.problems), check.problems
    assert store.ledger(TENANT)[0]["hash"] != receipts[0].ledger_hash


def test_a_deleted_middle_entry_is_a_gap(store, clock, reopen):
    receipts, _ = _populate(store, clock)
    assert len(receipts) >= 3
    store = _tamper(
        store, reopen, "DELETE FROM ledger WHERE seq=2", memory=lambda led: [e for e in led if e["seq"] != 2]
    )
    check = store.verify_ledger()
    assert not check.ok
    assert check.entries == len(receipts) - 1
    assert any("gap" in p and "seq 3" in p for p in check.problems), check.problems


def test_a_deleted_last_entry_is_visible_to_the_receipt_holder(store, clock, reopen):
    """A truncated tail keeps a valid chain; the receipt's ledger_seq/hash then name an
    entry that no longer exists, which is how a holder of the receipt sees it."""
    receipts, _ = _populate(store, clock)
    last = receipts[-1]
    store = _tamper(
        store,
        reopen,
        "DELETE FROM ledger WHERE seq=?",
        (last.ledger_seq,),
        memory=lambda led: [e for e in led if e["seq"] != last.ledger_seq],
    )
    assert store.verify_ledger().ok
    assert last.ledger_hash not in {e["hash"] for e in store.ledger(TENANT)}


def test_ledger_and_stored_receipts_hold_no_plaintext(store, clock):
    receipts, secrets = _populate(store, clock)
    # Sanity: the caller's receipt does name them (the caller knows them) ...
    assert any(SUBJECTS[0] == x.subject for r in receipts for x in r.released)
    # ... but nothing the store keeps about erasures does: scan every column of every row.
    tables = {"ledger": _stored(store, "ledger")}
    tables["receipts"] = _stored(store, "receipts")
    for table, rows in tables.items():
        assert rows, table
        blob = json.dumps(rows, default=str)
        blob_folded = blob.lower()
        for s in secrets:
            assert s not in blob, (table, s)
            assert s.lower() not in blob_folded, (table, s)
            assert json.dumps(s)[1:-1] not in blob, (table, s)


def test_ledger_holds_no_plaintext_for_unicode_values(store):
    tenant, subject, key = "Zoë-Ångström GmbH", "Søren Kierkegård", "clé:événement:1"
    store.write(key, "un souvenir", tenant=tenant, subject=subject, purpose="support")
    store.forget(tenant=tenant, subject=subject)
    tables = {"ledger": _stored(store, "ledger")}
    tables["receipts"] = _stored(store, "receipts")
    for table, rows in tables.items():
        raw = json.dumps(rows, default=str, ensure_ascii=False)
        escaped = json.dumps(rows, default=str, ensure_ascii=True)
        for s in (tenant, subject, key):
            assert s not in raw and json.dumps(s)[1:-1] not in escaped, (table, s)


def test_hashes_are_keyed_per_store(store, open_store, tmp_path):
    """The same key forgotten in two stores hashes differently (per-store secret), so a
    ledger cannot be matched against a dictionary of likely keys."""
    other = open_store(tmp_path / "other")
    for s in (store, other):
        s.write("same-key", "same text", tenant="acme", subject="alice", purpose="support")
        s.forget(tenant="acme", key="same-key")
    b1 = json.loads(store.ledger("acme")[0]["body"])
    b2 = json.loads(other.ledger("acme")[0]["body"])
    assert b1["erased"] != b2["erased"]
    assert b1["selector"]["tenant_h"] != b2["selector"]["tenant_h"]
    assert len(b1["erased"]) == 1 and len(b1["erased"][0]) >= 32
