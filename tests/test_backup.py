"""Backups with crypto-shredding (docs/concepts.md §3 rung 3 for backups, §4 invariant 6).

Real files, real AES-GCM. A "restore scenario" here is the one a backup is for: records lost
outside the forget path (a bug, a bad migration, an operator's DELETE), simulated by deleting
rows through the origin's connection, then brought back from a backup taken earlier. The
contract: nothing erased, released or expired after the backup comes back (the ledger is
replayed before anything is written), a subject whose key a forget destroyed cannot be read
from any backup at all, and a tampered or foreign file restores nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import efface
from efface import BackupCorrupt, BackupMismatch
from efface.backups.format import read_header

from conftest import on_postgres, pg_rows, raw_db

T = "acme"
ALICE_TEXTS = {
    "a:1": "Zebulon Quaxworth ordered the vermilion kettle",
    "a:2": "Zebulon Quaxworth asked about marmalade subscriptions",
}
BOB_TEXT = "Bertram prefers oolong with oatmilk"
SHARED_TEXT = "Joint note: kettle marmalade delivery window"
ALICE_NEEDLES = ["Quaxworth", "vermilion", "marmalade subscriptions", "Zebulon"]


# -- helpers ---------------------------------------------------------------------------------------
def in_memory(store) -> bool:
    """Whether the store runs on the memory origin (no file: the helpers edit its state)."""
    return getattr(store._origin, "physical", None) is None and not on_postgres(store)


def behind_the_back(store, change) -> None:
    """Edit the memory origin's state outside any transaction (what a raw SQL edit is on SQLite)."""
    store._origin._replace(change)


def lose_everything(store, tenant: str | None = None) -> None:
    """The incident a backup is for: rows deleted behind the store's back (not a forget, so no
    receipt, no ledger entry, no key destroyed)."""
    if on_postgres(store):
        where, args = ("WHERE tenant = %s", (store._tenant(tenant),)) if tenant else ("", ())
        ids = [r[0] for r in pg_rows(store, f"SELECT id FROM {{s}}.records {where}", args)]
        for table, col in (
            ("claims", "record_id"),
            ("lineage", "record_id"),
            ("mentions", "record_id"),
            ("quarantine", "record_id"),
            ("records", "id"),
        ):
            pg_rows(store, f"DELETE FROM {{s}}.{table} WHERE {col} = ANY(%s)", (ids,))
        return
    if in_memory(store):
        from efface.origin.memory import MemoryTx

        def change(s):
            tx = MemoryTx(s, s.epoch)
            tx.erase_records(
                [rid for rid, r in s.records.items() if tenant is None or r.tenant == store._tenant(tenant)]
            )

        behind_the_back(store, change)
        return
    conn = raw_db(store)
    where, args = ("WHERE tenant=?", (store._tenant(tenant),)) if tenant else ("", ())
    ids = [r[0] for r in conn.execute(f"SELECT id FROM records {where}", args)]
    with conn:
        for rid in ids:
            for table, col in (
                ("claims", "record_id"),
                ("lineage", "record_id"),
                ("mentions", "record_id"),
                ("quarantine", "record_id"),
                ("records", "id"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {col}=?", (rid,))


def lose_subjects(store) -> None:
    """Every registered subject's identifiers deleted behind the store's back."""
    if on_postgres(store):
        pg_rows(store, "DELETE FROM {s}.subjects")
    elif in_memory(store):
        behind_the_back(store, lambda s: s.subjects.clear())
    else:
        raw_db(store).execute("DELETE FROM subjects")


def snapshot(store) -> dict[tuple[str, str], tuple[str, frozenset]]:
    """(tenant, key) -> (text, {(subject, purpose, basis, expires_at)}) of every record, from the origin."""
    out: dict = {}
    if on_postgres(store):
        claims = pg_rows(store, "SELECT record_id, subject, purpose, basis, expires_at FROM {s}.claims")
        recs = store._origin.records_by_id(sorted({c[0] for c in claims}))
        rows = [(recs[rid].tenant, recs[rid].key, recs[rid].text, *rest) for rid, *rest in claims]
    elif in_memory(store):
        s = store._origin._state
        rows = [
            (
                s.records[c.record_id].tenant,
                s.records[c.record_id].key,
                s.records[c.record_id].text,
                c.subject,
                c.purpose,
                c.basis,
                c.expires_at,
            )
            for c in s.claims.values()
        ]
    else:
        rows = (
            raw_db(store)
            .execute(
                "SELECT r.tenant, r.key, r.text, c.subject, c.purpose, c.basis, c.expires_at"
                " FROM records r JOIN claims c ON c.record_id=r.id"
            )
            .fetchall()
        )
    for tenant, key, text, *claim in rows:
        prev = out.get((tenant, key), (text, frozenset()))
        out[tenant, key] = (text, prev[1] | {tuple(claim)})
    return out


def subject_key(store, subject: str, tenant: str = T) -> bytes | None:
    tenant = store._tenant(tenant)  # the origin keys rows by the tenant's id
    if in_memory(store) or on_postgres(store):
        return next((key for t, s, _kid, key in store._origin.subject_keys() if (t, s) == (tenant, subject)), None)
    row = (
        raw_db(store).execute("SELECT key FROM subject_keys WHERE tenant=? AND subject=?", (tenant, subject)).fetchone()
    )
    return None if row is None else row[0]


def scan(paths, needles) -> dict:
    """Raw, case-insensitive byte search: needle -> files that contain it."""
    found: dict = {}
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        for needle in needles:
            raw = needle if isinstance(needle, bytes) else needle.lower().encode()
            hay = data if isinstance(needle, bytes) else data.lower()
            if raw in hay:
                found.setdefault(needle, []).append(os.path.basename(path))
    return found


def files_under(directory) -> list[str]:
    return [os.path.join(r, n) for r, _d, fs in os.walk(directory) for n in fs]


def world(store) -> None:
    store.register_subject("alice", tenant=T, identifiers=["Zebulon Quaxworth"])
    for key, text in ALICE_TEXTS.items():
        store.write(key, text, tenant=T, subject="alice", purpose="support")
    store.write("b:1", BOB_TEXT, tenant=T, subject="bob", purpose="support", metadata={"lang": "en"})
    store.write("shared", SHARED_TEXT, tenant=T, subject="alice", purpose="support")
    store.retain("shared", tenant=T, subject="bob", purpose="support", basis="contract")


def read_text(store, key, purpose="support", tenant=T):
    m = store.read(key, tenant=tenant, purpose=purpose)
    return None if m is None else m.text


def recall_keys(store, query, purpose="support", tenant=T):
    return [h.key for h in store.recall(query, tenant=tenant, purpose=purpose, k=50)]


# -- round trip ------------------------------------------------------------------------------------
def test_round_trip_brings_back_lost_records_with_claims_metadata_and_recall(store, tmp_path, clock):
    world(store)
    store.write(
        "g:1",
        "globex keeps the lighthouse logbook",
        tenant="globex",
        subject="carol",
        purpose="ops",
        ttl=10_000,
        metadata={"n": 3},
        sources=["b:src"],
    )
    store.write("digest", "digest of kettle orders", tenant=T, subject="svc", purpose="analytics", sources=["a:1"])
    store.set_policy(T, "quarantine")
    before = snapshot(store)
    result = store.backup(tmp_path / "b.efb")
    assert (result.records, result.subjects) == (6, 4)
    assert os.path.getsize(tmp_path / "b.efb") == result.bytes

    lose_everything(store)
    assert store.read("b:1", tenant=T, purpose="support") is None
    restored = store.restore(tmp_path / "b.efb")
    assert (restored.restored, restored.shredded, restored.replayed, restored.present) == (6, 0, 0, 0)
    assert snapshot(store) == before  # text and every claim, expiry included
    m = store.read("g:1", tenant="globex", purpose="ops")
    assert (m.text, dict(m.metadata), m.sources) == ("globex keeps the lighthouse logbook", {"n": 3}, ("b:src",))
    assert "b:1" in recall_keys(store, "oolong oatmilk")
    assert "a:1" in recall_keys(store, "vermilion kettle")
    store.compact()  # the vector index absorbs the restored records like any write
    assert "a:2" in recall_keys(store, "marmalade subscriptions")
    # Restoring again changes nothing: restore never overwrites.
    again = store.restore(tmp_path / "b.efb")
    assert (again.restored, again.present) == (0, 6)
    assert snapshot(store) == before
    assert store.verify_ledger().ok
    kinds = [e["kind"] for e in store.ledger()]
    assert kinds.count("backup") == 1 and kinds.count("restore") == 4  # one per tenant, per restore
    # Lineage came back too: forgetting alice quarantines the digest built from a:1.
    receipt = store.forget(tenant=T, subject="alice")
    assert "digest" in receipt.quarantined


def test_restored_quarantine_and_identifiers(store, tmp_path):
    world(store)
    store.write("note", "Zebulon Quaxworth called the desk", tenant=T, subject="svc", purpose="analytics")
    store.forget(tenant=T, subject="bob", purpose="support")  # nothing quarantined: bob is not registered
    store.write("q", "built from b:1", tenant=T, subject="svc", purpose="analytics", sources=["b:1"])
    store.write("b:1", BOB_TEXT, tenant=T, subject="bob", purpose="support")
    store.forget(tenant=T, key="b:1")  # quarantines q (lineage)
    assert store.read("q", tenant=T, purpose="analytics") is None
    store.backup(tmp_path / "b.efb")
    lose_everything(store)
    lose_subjects(store)
    result = store.restore(tmp_path / "b.efb")
    assert result.subjects == 1
    assert store.read("q", tenant=T, purpose="analytics") is None  # still quarantined
    assert [i.key for i in store.quarantined(tenant=T)] == ["q"]
    # alice's identifiers came back, and the restored note is known to name her.
    receipt = store.forget(tenant=T, subject="alice")
    assert "note" in receipt.quarantined and receipt.identifiers_erased


# -- no zombies ------------------------------------------------------------------------------------
def test_no_zombies_forget_after_backup_shreds_and_scans_clean(store, tmp_path, store_path):
    world(store)
    dest = tmp_path / "b.efb"
    store.backup(dest)
    alice_key = subject_key(store, "alice")
    assert alice_key is not None and len(alice_key) == 32
    # Encrypted: neither texts, keys, subjects nor identifiers are in the backup's bytes. Not
    # the 3-byte key "a:1": ciphertext holds any 3 given bytes once in 16 MiB, so it made the
    # test fail now and then on chance alone (5 bytes: once in a TiB).
    assert scan([dest], ALICE_NEEDLES + ["oolong", "alice", "shared", alice_key]) == {}

    receipt = store.forget(tenant=T, subject="alice")
    assert set(receipt.erased) == {"a:1", "a:2"}
    assert receipt.paths["backups"].state == "shredded"
    assert subject_key(store, "alice") is None  # gone in the erasure's own transaction
    assert store.status(receipt.handle).paths["backups"].state == "shredded"

    lose_everything(store)
    result = store.restore(dest)
    assert result.shredded == 2 and result.restored == 2  # b:1, and shared for bob
    for key in ALICE_TEXTS:
        assert store.read(key, tenant=T, purpose="support") is None
    assert not set(ALICE_TEXTS) & set(recall_keys(store, "Zebulon Quaxworth vermilion kettle marmalade"))
    shared = store.read("shared", tenant=T, purpose="support")
    assert [c.subject for c in shared.claims] == ["bob"]  # alice's claim was sealed with her key

    store.compact()
    assert store.wait(receipt.handle, timeout=5).settled
    files = files_under(store_path)
    # (memory: no origin file; postgres: the origin is the database, its files the server's)
    assert any(f.endswith("origin.db-wal") for f in files) or in_memory(store) or on_postgres(store)
    assert any(f.endswith(".usearch") for f in files) or on_postgres(store)  # (postgres: vectors in the database)
    assert scan(files, ALICE_NEEDLES + [alice_key]) == {}
    store.close()
    assert scan(files_under(store_path), ALICE_NEEDLES + [alice_key]) == {}


def test_record_retained_for_bob_stays_restorable_after_alices_key_is_destroyed(store, tmp_path):
    world(store)
    store.backup(tmp_path / "b.efb")
    store.forget(tenant=T, subject="alice")
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert read_text(store, "shared") == SHARED_TEXT
    assert {(c.subject, c.basis) for c in store.read("shared", tenant=T, purpose="support").claims} == {
        ("bob", "contract")
    }
    assert (result.restored, result.shredded) == (2, 2)


def test_purpose_only_forget_after_backup_is_replayed_from_the_ledger(store, tmp_path):
    store.write("s:1", "alice support ticket one", tenant=T, subject="alice", purpose="support")
    store.write("x:1", "alice analytics row", tenant=T, subject="alice", purpose="analytics")
    store.write("both", "alice both purposes", tenant=T, subject="alice", purpose="support")
    store.retain("both", tenant=T, subject="alice", purpose="analytics", basis="consent")
    store.backup(tmp_path / "b.efb")
    receipt = store.forget(tenant=T, purpose="analytics")
    # alice keeps support claims, so her key lives: only the ledger replay keeps x:1 out.
    assert receipt.paths["backups"].state == "ledger-replay"
    assert subject_key(store, "alice") is not None
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert (result.restored, result.replayed, result.shredded) == (2, 1, 0)
    assert store.read("x:1", tenant=T, purpose="analytics") is None
    assert store.read("both", tenant=T, purpose="analytics") is None
    assert read_text(store, "both") == "alice both purposes"


def test_ttl_expiry_after_backup_is_honoured(store, tmp_path, clock):
    store.write("t:short", "short lived note", tenant=T, subject="alice", purpose="support", ttl=100)
    store.write("t:long", "long lived note", tenant=T, subject="alice", purpose="support", ttl=10_000)
    store.write("t:dana", "dana only note", tenant=T, subject="dana", purpose="support", ttl=100)
    store.backup(tmp_path / "b.efb")
    clock.advance(200)
    # Rows lost before the sweeper ran: restore still knows the claims have expired.
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert result.restored == 1 and result.replayed + result.shredded == 2
    assert store.read("t:short", tenant=T, purpose="support") is None
    assert store.read("t:dana", tenant=T, purpose="support") is None
    m = store.read("t:long", tenant=T, purpose="support")
    assert m.claims[0].expires_at == pytest.approx(clock.now - 200 + 10_000)
    clock.advance(10_000)
    store.sweep()
    assert store.read("t:long", tenant=T, purpose="support") is None


def test_a_subject_released_earlier_keeps_the_backup_readable_so_the_receipt_says_ledger_replay(store, tmp_path):
    store.write("r", "shared record under two subjects", tenant=T, subject="alice", purpose="support")
    store.retain("r", tenant=T, subject="bob", purpose="support", basis="consent")
    store.write("b:other", "bob keeps another record", tenant=T, subject="bob", purpose="support")
    store.backup(tmp_path / "b.efb")
    store.forget(tenant=T, subject="bob", key="r")  # bob keeps his key (b:other)
    receipt = store.forget(tenant=T, subject="alice")
    assert receipt.erased == ("r",) and subject_key(store, "alice") is None
    # The backup still holds r's key wrapped under bob's (living) key: not shredded.
    assert receipt.paths["backups"].state == "ledger-replay"
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert store.read("r", tenant=T, purpose="support") is None
    assert (result.restored, result.replayed) == (1, 1)


def test_verify_counts_backups_on_the_erased_rung(store, tmp_path):
    """Rung 3 for backups is crypto-shredding (docs/concepts.md §3): a forget that destroyed the keys
    can be proven erased, with the key bytes themselves among the fingerprints the byte scan
    looks for; one that left the content under living keys cannot, and says why."""
    world(store)
    store.write("c:1", "carol keeps two records one", tenant=T, subject="carol", purpose="support")
    store.write("c:2", "carol keeps two records two", tenant=T, subject="carol", purpose="support")
    store.backup(tmp_path / "b.efb")
    shredded = store.forget(tenant=T, subject="alice")
    replayed = store.forget(tenant=T, key="c:1")
    assert replayed.paths["backups"].state == "ledger-replay"
    store.compact()
    proof = store.verify(shredded.handle)
    checks = {c.name: c for c in proof.checks}
    assert proof.level == "erased" and checks["backups"].outcome == "pass"
    assert "datakey" in checks["bytes"].detail
    st = store.status(shredded.handle)
    assert st.erased and st.paths["backups"].erased_epoch >= shredded.epoch and not st.alarms
    other = store.verify(replayed.handle)
    assert other.level == "unreadable"
    assert {c.name: c.outcome for c in other.checks}["backups"] == "fail"
    st = store.status(replayed.handle)
    # the store's own files are rid of it (wait returns); the backup path says what is left
    assert st.settled and st.erased and not st.alarms
    assert st.paths["backups"].state == "ledger-replay" and st.paths["backups"].erased_epoch < replayed.epoch


def test_a_record_redacted_after_the_backup_does_not_come_back_unredacted(store, tmp_path):
    world(store)
    store.write("digest", "Digest: Zebulon Quaxworth wants marmalade", tenant=T, subject="svc", purpose="analytics")
    store.set_policy(T, "redact")
    store.backup(tmp_path / "b.efb")
    receipt = store.forget(tenant=T, subject="alice")
    assert [(d.key, d.action) for d in receipt.derivations] == [("digest", "redacted")]
    # The unredacted text is still in the backup under svc's (living) key: not shredded.
    assert receipt.paths["backups"].state == "ledger-replay"
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert store.read("digest", tenant=T, purpose="analytics") is None
    assert result.replayed == 1 and result.shredded == 2


def test_erased_then_rewritten_key_is_not_resurrected_in_its_old_version(store, tmp_path):
    store.write("k", "old version of k", tenant=T, subject="alice", purpose="support")
    store.write("keep", "alice keeps this", tenant=T, subject="alice", purpose="support")
    store.backup(tmp_path / "b.efb")
    store.forget(tenant=T, key="k")
    store.write("k", "new version of k", tenant=T, subject="alice", purpose="support")
    result = store.restore(tmp_path / "b.efb")
    assert read_text(store, "k") == "new version of k" and result.present == 1
    lose_everything(store)
    result = store.restore(tmp_path / "b.efb")
    assert store.read("k", tenant=T, purpose="support") is None and result.replayed == 1


def test_receipts_have_no_backups_path_until_a_backup_exists(store, tmp_path):
    store.write("a", "one", tenant=T, subject="alice", purpose="support")
    store.write("b", "two", tenant=T, subject="bob", purpose="support")
    assert "backups" not in store.forget(tenant=T, key="a").paths
    store.backup(tmp_path / "b.efb")
    receipt = store.forget(tenant=T, key="b")
    assert receipt.paths["backups"].state == "shredded"
    assert receipt.to_dict()["paths"]["backups"]["state"] == "shredded"
    assert store.status(receipt.handle).settled or store.wait(receipt.handle, 5).settled


# -- no personal data in the clear -----------------------------------------------------------------
def test_header_ledger_and_errors_hold_no_personal_data(store, tmp_path):
    world(store)
    result = store.backup(tmp_path / "b.efb")
    header = read_header(os.fspath(tmp_path / "b.efb"))
    assert header["backup_id"] == result.backup_id and header["epoch"] == result.epoch
    assert set(header) == {
        "format",
        "store_id",
        "backup_id",
        "epoch",
        "ledger_seq",
        "ledger_hash",
        "created_at",
        "embedder",
        "counts",
    }
    store.restore(tmp_path / "b.efb")
    text = json.dumps([header, store.ledger(), store.receipts()])
    for needle in ["alice", "bob", "acme", "a:1", "shared", "Quaxworth", os.fspath(tmp_path)]:
        assert needle not in text


# -- tamper, foreign stores, bad paths -------------------------------------------------------------
@pytest.mark.parametrize("where", ["header", "first frame", "middle", "last frame", "trailer", "truncated", "appended"])
def test_a_modified_backup_fails_authentication_and_restores_nothing(store, tmp_path, where):
    world(store)
    dest = tmp_path / "b.efb"
    store.backup(dest)
    data = bytearray(dest.read_bytes())
    head_end = 16 + 4 + int.from_bytes(data[16:20], "big")
    # In the header: the ledger position, the field that decides what a restore replays.
    spot = {
        "header": data.index(b'"ledger_seq":') + 13,
        "first frame": head_end + 40,
        "middle": len(data) // 2,
        "last frame": len(data) - 60,
        "trailer": len(data) - 5,
    }.get(where)
    if spot is not None:
        data[spot] ^= 0x01
    elif where == "truncated":
        data = data[:-100]
    else:
        data += b"\x00" * 16
    dest.write_bytes(bytes(data))
    lose_everything(store)
    with pytest.raises(BackupCorrupt) as exc:
        store.restore(dest)
    assert "alice" not in str(exc.value) and "nothing was restored" in str(exc.value)
    assert snapshot(store) == {}
    assert not [e for e in store.ledger() if e["kind"] == "restore"]


def test_a_frame_that_fails_authentication_after_the_file_check_restores_nothing(store, tmp_path, monkeypatch):
    """Belt and braces: the per-entry AES-GCM check stands even if the file changes between the
    whole-file MAC check and the decryption (the restore is one transaction per tenant, after
    every entry was decrypted)."""
    import efface.backups.format as b

    world(store)
    dest = tmp_path / "b.efb"
    store.backup(dest)
    monkeypatch.setattr(b, "verify_file", lambda path, key: None)
    data = bytearray(dest.read_bytes())
    data[len(data) - 80] ^= 0x01
    dest.write_bytes(bytes(data))
    lose_everything(store)
    with pytest.raises(BackupCorrupt):
        store.restore(dest)
    assert snapshot(store) == {}


def test_a_backup_of_another_store_is_refused(open_store, tmp_path):
    one = open_store(tmp_path / "one")
    two = open_store(tmp_path / "two")
    world(one)
    one.backup(tmp_path / "one.efb")
    with pytest.raises(BackupMismatch):
        two.restore(tmp_path / "one.efb")
    assert snapshot(two) == {}


def test_not_a_backup_and_bad_destinations(store, tmp_path):
    (tmp_path / "junk").write_bytes(b"hello, this is not a backup")
    with pytest.raises(BackupCorrupt):
        store.restore(tmp_path / "junk")
    with pytest.raises(efface.NotFound):
        store.restore(tmp_path / "missing.efb")
    with pytest.raises(efface.InvalidInput):
        store.backup(tmp_path)
    with pytest.raises(efface.InvalidInput):
        store.backup(tmp_path / "no" / "such" / "dir.efb")


@pytest.mark.parametrize("where", [5, None, b"/tmp/bytes.efb", "/tmp/a\x00b.efb"], ids=["int", "None", "bytes", "NUL"])
def test_a_backup_location_that_is_not_a_path_is_invalid_input(store, where):
    """An int or None reached ``os.fspath`` and raised a raw TypeError; a NUL a raw ValueError."""
    store.write("k1", "Alice prefers green tea", tenant="t", subject="alice", purpose="support")
    with pytest.raises(efface.InvalidInput, match="path"):
        store.backup(where)
    with pytest.raises(efface.InvalidInput, match="path"):
        store.restore(where)
    assert store.read("k1", tenant="t", purpose="support").text == "Alice prefers green tea"


def test_a_rewritten_ledger_refuses_the_restore(store, tmp_path):
    world(store)
    store.backup(tmp_path / "b.efb")
    store.forget(tenant=T, subject="alice")
    if in_memory(store):  # someone hides the erasure
        behind_the_back(
            store,
            lambda s: s.ledger.__setitem__(
                slice(None), [{**e, "body": "{}"} if e["kind"] == "forget" else e for e in s.ledger]
            ),
        )
    else:
        raw_db(store).execute("UPDATE ledger SET body='{}' WHERE kind='forget'")  # someone hides the erasure
    lose_everything(store)
    with pytest.raises(efface.UnverifiableDeletion):
        store.restore(tmp_path / "b.efb")
    assert snapshot(store) == {}


# -- kill -9 during a backup -----------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import sys, efface
    store = efface.open(sys.argv[1], embedder="hashing", background=False)
    items = [{"key": f"k{i}", "text": f"plaintextmarker{i} " + "filler words " * 20,
              "subject": f"s{i % 50}", "purpose": "support"} for i in range(int(sys.argv[3]))]
    for start in range(0, len(items), 2000):
        store.write_many(items[start:start + 2000], tenant="acme")
    print("ready", flush=True)
    while True:
        store.backup(sys.argv[2], overwrite=True)
""")


@pytest.mark.slow
@pytest.mark.sqlite_only(reason="a killed process's store is reopened and restored into; nothing persists")
def test_kill_during_backup_leaves_no_partial_file_and_no_plaintext(tmp_path, open_store):
    store_dir, dest = tmp_path / "store", tmp_path / "out" / "b.efb"
    dest.parent.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, os.fspath(store_dir), os.fspath(dest), "2000"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        # The first backup appears whole; the next one is in its temporary file when we kill.
        while not dest.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        while not any(n.endswith(".efface-tmp") for n in os.listdir(dest.parent)) and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    leftovers = [os.path.join(dest.parent, n) for n in os.listdir(dest.parent) if n != dest.name]
    assert leftovers, "the kill was meant to land mid-backup"
    assert dest.exists()  # the previous backup, whole (checked by the restore below)
    assert scan(leftovers + [os.fspath(dest)], ["plaintextmarker", "filler words"]) == {}
    store = open_store(store_dir)
    result = store.restore(dest)  # whichever backup DEST holds is whole and authentic
    assert result.present == 2000
    store.backup(dest, overwrite=True)
    assert os.listdir(dest.parent) == [dest.name]  # the dead run's temporary file is cleaned up


def test_an_existing_destination_is_refused_unless_overwrite(store, tmp_path):
    """backup(dest) replaced whatever file was at dest without a word (an earlier backup, or
    any file the caller named by mistake). Now it is refused before anything is written (no
    ledger entry), and overwrite=True replaces it."""
    store.write("k1", "Alice prefers green tea", tenant="t", subject="alice", purpose="support")
    (tmp_path / "out").mkdir()
    dest = tmp_path / "out" / "b.efb"
    dest.write_bytes(b"someone's precious file")
    entries = len(store.ledger())
    with pytest.raises(efface.InvalidInput, match=r"exists already.*overwrite=True"):
        store.backup(dest)
    assert dest.read_bytes() == b"someone's precious file"
    assert len(store.ledger()) == entries and os.listdir(dest.parent) == ["b.efb"]
    with pytest.raises(efface.InvalidInput, match="overwrite"):
        store.backup(tmp_path / "out" / "c.efb", overwrite="yes")
    result = store.backup(dest, overwrite=True)
    assert read_header(dest)["backup_id"] == result.backup_id
    with pytest.raises(efface.InvalidInput, match="exists already"):
        store.backup(dest)  # an earlier backup too
    assert read_header(dest)["backup_id"] == result.backup_id


def test_a_destination_that_appears_meanwhile_is_not_replaced(tmp_path):
    """The last step gives the finished file its name with a hard link, which fails on a
    file made after the first look (a rename would silently replace it)."""
    from efface.backups.backup import _place_new

    (tmp_path / "tmp").write_bytes(b"backup")
    (tmp_path / "dest").write_bytes(b"theirs")
    with pytest.raises(efface.InvalidInput, match="exists already"):
        _place_new(os.fspath(tmp_path / "tmp"), os.fspath(tmp_path / "dest"))
    assert (tmp_path / "dest").read_bytes() == b"theirs"
    _place_new(os.fspath(tmp_path / "tmp"), os.fspath(tmp_path / "new"))
    assert (tmp_path / "new").read_bytes() == b"backup" and not (tmp_path / "tmp").exists()


def test_a_backup_refused_at_its_last_step_leaves_no_ledger_entry(store, tmp_path, monkeypatch):
    """A file made at dest while the backup was being written refused the backup at its last
    step, after its ledger entry had committed: the ledger named a backup that was never
    written. Now the name is claimed before the commit, and a refusal rolls the entry back."""
    from efface.backups import format as fmt

    store.write("k1", "Alice prefers green tea", tenant="t", subject="alice", purpose="support")
    dest = tmp_path / "b.efb"
    finish = fmt.BackupWriter.finish

    def racing_finish(self):
        dest.write_bytes(b"another backup's file")  # another writer takes the name meanwhile
        return finish(self)

    monkeypatch.setattr(fmt.BackupWriter, "finish", racing_finish)
    entries = store.ledger()
    with pytest.raises(efface.InvalidInput, match="exists already"):
        store.backup(dest)
    assert dest.read_bytes() == b"another backup's file"
    assert store.ledger() == entries
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".efface-tmp")]
    monkeypatch.setattr(fmt.BackupWriter, "finish", finish)
    result = store.backup(tmp_path / "c.efb")
    assert [e for e in store.ledger() if e not in entries][-1]["kind"] == "backup"
    assert read_header(tmp_path / "c.efb")["backup_id"] == result.backup_id


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_backup_and_restore(tmp_path):
    from click.testing import CliRunner

    from efface.cli import cli

    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "COLUMNS": "200"})
    base = ["--store", os.fspath(tmp_path / "s"), "--embedder", "hashing", "--tenant", T]

    def run(*args, code=0):
        r = runner.invoke(cli, [*base, *args])
        assert r.exit_code == code, (r.stdout, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr
        return r

    run("write", "a:1", "Zebulon Quaxworth ordered tea", "--subject", "alice", "--purpose", "support")
    doc = json.loads(run("backup", os.fspath(tmp_path / "b.efb"), "--json").stdout)
    assert doc["records"] == 1 and doc["backup_id"].startswith("efb_")
    assert "1" in run("backup", os.fspath(tmp_path / "c.efb")).stdout
    receipt = json.loads(run("forget", "--subject", "alice", "--json").stdout)
    assert receipt["paths"]["backups"]["state"] == "shredded"
    doc = json.loads(run("restore", os.fspath(tmp_path / "b.efb"), "--json").stdout)
    assert (doc["restored"], doc["shredded"]) == (0, 1)
    assert "shredded" in run("restore", os.fspath(tmp_path / "c.efb")).stdout
    (tmp_path / "bad.efb").write_bytes(b"not a backup")
    err = json.loads(run("restore", os.fspath(tmp_path / "bad.efb"), "--json", code=1).stdout)
    assert err["error"]["type"] == "BackupCorrupt"
    err = json.loads(run("backup", os.fspath(tmp_path), "--json", code=2).stdout)
    assert err["error"]["type"] in ("InvalidInput", "BadParameter")
    err = json.loads(run("backup", os.fspath(tmp_path / "b.efb"), "--json", code=2).stdout)
    assert err["error"]["type"] == "InvalidInput" and "--overwrite" in err["error"]["message"]
    doc = json.loads(run("backup", os.fspath(tmp_path / "b.efb"), "--overwrite", "--json").stdout)
    assert read_header(tmp_path / "b.efb")["backup_id"] == doc["backup_id"]


# -- property: what comes back is exactly what survived ----------------------------------------------
KEYS = ("k0", "k1", "k2", "k3", "k4")
SUBJECTS = ("alice", "bob", "carol")
PURPOSES = ("support", "analytics")
BASES = ("consent", "legal_hold")

op = st.one_of(
    st.tuples(
        st.just("write"),
        st.sampled_from(KEYS),
        st.sampled_from(SUBJECTS),
        st.sampled_from(PURPOSES),
        st.integers(0, 99),
    ),
    st.tuples(
        st.just("retain"),
        st.sampled_from(KEYS),
        st.sampled_from(SUBJECTS),
        st.sampled_from(PURPOSES),
        st.sampled_from(BASES),
    ),
    st.tuples(
        st.just("forget"),
        st.one_of(st.none(), st.sampled_from(SUBJECTS)),
        st.one_of(st.none(), st.sampled_from(PURPOSES)),
        st.one_of(st.none(), st.sampled_from(KEYS)),
    ),
)


def apply(store, o, released: set) -> None:
    if o[0] == "write":
        try:
            store.write(o[1], f"text {o[1]} v{o[4]}", tenant=T, subject=o[2], purpose=o[3])
        except efface.KeyInUse:  # another subject's record: refused, nothing written
            pass
    elif o[0] == "retain":
        try:
            store.retain(o[1], tenant=T, subject=o[2], purpose=o[3], basis=o[4])
        except efface.NotFound:
            pass
    else:
        _, subject, purpose, key = o
        if subject is None and purpose is None and key is None:
            return
        try:
            receipt = store.forget(tenant=T, subject=subject, purpose=purpose, key=key)
        except efface.UnknownPurpose:
            return
        released |= {(r.key, r.subject, r.purpose, r.basis) for r in receipt.released}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(op, min_size=1, max_size=12), after=st.lists(op, max_size=12))
def test_restore_brings_back_exactly_what_survived(tmp_path_factory, before, after):
    path = tmp_path_factory.mktemp("prop")
    with efface.open(path / "s", embedder="hashing", background=False) as store:
        for o in before:
            apply(store, o, set())
        backed = snapshot(store)
        store.backup(path / "b.efb")
        released: set = set()
        for o in after:
            apply(store, o, released)
        lose_everything(store)
        store.restore(path / "b.efb")
        got = snapshot(store)
    expected = {}
    for (tenant, key), (text, claims) in backed.items():
        kept = frozenset(c for c in claims if (key, c[0], c[1], c[2]) not in released)
        if kept:
            expected[tenant, key] = (text, kept)
    assert got == expected
