"""No subject name, record key or tenant name in clear in the PostgreSQL database (issue #34
item 3; :mod:`efface.origin.postgres.names`): the columns that name them hold keyed hashes
under the KEK file's name key, the names efface gives back are sealed, a KEK rotation keeps
the hashes, and a database written before schema 6 is rewritten at open."""

from __future__ import annotations

import base64
import json
import secrets
import warnings

import pytest

import efface
from efface.origin.ledger import SECRET_META
from efface.origin.postgres import KeyFileCreated, KeyFileMismatch, maintenance
from efface.origin.postgres.hashsecret import SECRET_ID_META
from efface.origin.postgres.keys import NAME_KEY_META, KekFile, Keys
from efface.origin.postgres.schema import TABLES

from .filescan import files_holding

NAME = "alice-unique-name"
T = f"tenant-{NAME}"
KEYS = [f"user:{NAME}@example.com/notes-{i}" for i in range(3)]
TEXTS = ["she prefers green tea", "her order 7731 shipped", "call back on tuesday"]
OTHER = "bob-other-subject"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _write(s):
    s.register_subject(NAME, tenant=T, identifiers=[f"{NAME}@example.com"])
    for key, text in zip(KEYS, TEXTS, strict=True):
        s.write(key, text, tenant=T, subject=NAME, purpose="support")
    s.write("summary", "a summary", tenant=T, subject=OTHER, purpose="support", sources=[KEYS[0]])
    s.write("mention", f"{NAME}@example.com called about the order", tenant=T, subject=OTHER, purpose="support")


def _registered(s) -> list[str]:
    return sorted(subject for _t, subject, _ids in s._origin.all_subjects())


def _dump(pg_db) -> str:
    out = []
    with pg_db.connect() as conn:
        for table in TABLES:
            out += [r[0] for r in conn.execute(f"SELECT row_to_json(t)::text FROM efface.{table} t")]
    return "\n".join(out)


def _clear_hits(pg_db, needle: bytes) -> dict[str, int]:
    """Files of the database's directory and of pg_wal holding ``needle`` in clear."""
    return files_holding(pg_db, [needle])


def _kinds(store, handle, pg_db) -> dict[str, int]:
    """Hits of the erasure's server-side fingerprints in the database's files and WAL, by kind."""
    o = store._origin
    scan = store._verifier._scan_fn(o.evidence(handle)["fingerprints"], [0])
    with pg_db.connect() as conn:
        conn.execute("CHECKPOINT")
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    data_dir = str(pg_db.server.datadir)
    out: dict[str, int] = {}
    for files in (maintenance.db_files(f"{data_dir}/base/{dboid}"), maintenance.wal_files(data_dir)):
        found, _ = scan(files, data_dir)
        for per in found.values():
            for kind, n in per.items():
                out[kind] = out.get(kind, 0) + n
    return out


def test_no_clear_name_key_or_tenant_reaches_the_servers_files(pg_db, kek, tmp_path):
    """The name is the subject's, part of every key and of the tenant's name: before the
    forget, after it and before the maintenance, neither the tables nor a byte of the
    database's files or of the WAL hold it in clear; the ladder still finds the stored forms
    (sealed values, the names' hashes) before the maintenance, and none after."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        assert NAME not in _dump(pg_db)
        assert _clear_hits(pg_db, NAME.encode()) == {}
        # what efface gives back, it opens
        assert s.read(KEYS[1], tenant=T, purpose="support").text == TEXTS[1]
        assert [m.key for m in s.scan(tenant=T, purpose="support", prefix="user:")] == KEYS
        assert [m.key for m in s.scan(tenant=T, purpose="support", after="mention", limit=2)] == ["summary", KEYS[0]]
        assert _registered(s) == [NAME]
        receipt = s.forget(tenant=T, subject=NAME)
        assert sorted(receipt.erased) == KEYS
        assert _clear_hits(pg_db, NAME.encode()) == {}, "no clear name before the maintenance either"
        before = _kinds(s, receipt.handle, pg_db)
        assert before.get("name_h", 0) > 0 and before.get("sealed", 0) > 0, before
        assert not any(before.get(k) for k in ("identifier", "key", "tenant")), before
        assert s.wait(receipt.handle, 60, until="erased").erased
        assert _kinds(s, receipt.handle, pg_db) == {}
        v = s.verify(receipt.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
        # derived from an erased record, naming the erased subject: held back, in key order
        assert [q.key for q in s.quarantined(tenant=T)] == ["mention", "summary"]


def test_a_kek_rotation_keeps_the_lookups_and_a_reopened_store_finds_everything(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        with s._origin._pool.connection() as conn:
            rotation = s._origin._keys.rotate(conn)
        assert rotation.rewrapped > 0
        assert s.read(KEYS[0], tenant=T, purpose="support").text == TEXTS[0]
    with _open(pg_db, kek, tmp_path / "b") as again:
        assert again.read(KEYS[2], tenant=T, purpose="support").text == TEXTS[2]
        assert [m.key for m in again.scan(tenant=T, purpose="support", subject=NAME)] == KEYS
        assert _registered(again) == [NAME]
        r = again.forget(tenant=T, prefix="user:")
        assert sorted(r.erased) == KEYS
        assert _registered(again) == []  # its last claim went with the prefix: so did its registration


def test_a_key_file_without_the_stores_name_key_is_refused(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write(KEYS[0], TEXTS[0], tenant=T, subject=NAME, purpose="support")
    doc = json.loads(kek.read_text())
    other = tmp_path / "other.kek"
    for name_key in (base64.b64encode(secrets.token_bytes(32)).decode(), None):  # another store's; none
        if name_key is None:
            doc.pop("name_key")
        else:
            doc["name_key"] = name_key
        other.write_text(json.dumps(doc))
        with pg_db.connect() as conn, pytest.raises(KeyFileMismatch, match="name key"):
            Keys(other).open(conn)
    assert KekFile(other).name_key() is None, "never a new name key where the database names one"


def _back_to_clear_names(pg_db, kek) -> None:
    """Make the database what schema 5 wrote: every hash replaced by the clear name, no
    sealed copies, no name key (neither in the file nor in the database), the hash secret
    in meta (schema 7 moves it into the file)."""
    keys = Keys(kek)
    with pg_db.connect() as conn:
        keys.open(conn)
        conn.execute("INSERT INTO efface.meta(k, v) VALUES (%s, %s)", (SECRET_META, keys.hash_secret().hex()))
        conn.execute("DELETE FROM efface.meta WHERE k = %s", (SECRET_ID_META,))
        (tenant,) = conn.execute("SELECT DISTINCT tenant FROM efface.records").fetchone()
        for key in [*KEYS, "summary", "mention"]:
            h = keys.name_h("key", tenant, key)
            conn.execute("UPDATE efface.records SET key = %s, key_sealed = NULL WHERE key = %s", (key, h))
            conn.execute("UPDATE efface.lineage SET source_key = %s WHERE source_key = %s", (key, h))
        for subject in (NAME, OTHER, ""):
            h = keys.name_h("subject", tenant, subject)
            for table in ("claims", "mentions", "subjects", "data_keys"):
                conn.execute(f"UPDATE efface.{table} SET subject = %s WHERE subject = %s", (subject, h))
        conn.execute("UPDATE efface.data_keys SET name = NULL")
        conn.execute("UPDATE efface.meta SET v = '5' WHERE k = 'schema_version'")
        conn.execute("DELETE FROM efface.meta WHERE k = %s", (NAME_KEY_META,))
    doc = json.loads(kek.read_text())
    del doc["name_key"]
    kek.write_text(json.dumps(doc))
    assert KekFile(kek).name_key() is None


def test_a_database_with_clear_names_is_rewritten_at_open_and_the_maintenance_clears_the_old_bytes(
    pg_db, kek, tmp_path
):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
    _back_to_clear_names(pg_db, kek)
    assert NAME in _dump(pg_db)
    assert _clear_hits(pg_db, NAME.encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = _open(pg_db, kek, tmp_path / "b")
    assert any(issubclass(w.category, KeyFileCreated) and "name key" in str(w.message) for w in caught)
    with s:
        assert KekFile(kek).name_key() is not None
        assert NAME not in _dump(pg_db)
        assert s.read(KEYS[1], tenant=T, purpose="support").text == TEXTS[1]
        assert [m.key for m in s.scan(tenant=T, purpose="support", subject=NAME)] == KEYS
        assert [m.key for m in s.scan(tenant=T, purpose="support", subject=OTHER)] == ["mention", "summary"]
        assert _registered(s) == [NAME]
        assert s._origin.maintain(), "the rewrite owes a maintenance"
        assert _clear_hits(pg_db, NAME.encode()) == {}
        r = s.forget(tenant=T, subject=NAME)
        assert sorted(r.erased) == KEYS
        assert s.wait(r.handle, 60, until="erased").erased
        assert s.verify(r.handle).level == "erased"


def test_a_subject_written_again_after_its_erasure_is_not_residue_of_it(pg_db, kek, tmp_path):
    """A subject forgotten from a tenant and written to it again: its name's hash is stored
    again (the new subject's), which verify does not count against the erasure; the old
    hash still counts while only the erasure's rows held it (before the maintenance)."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        r = s.forget(tenant=T, subject=NAME)
        assert _kinds(s, r.handle, pg_db).get("name_h", 0) > 0, "the erased rows' name hashes, before maintenance"
        s.write("again", "back in the tenant", tenant=T, subject=NAME, purpose="support")
        assert s.wait(r.handle, 60, until="erased").erased
        v = s.verify(r.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
        assert s.read("again", tenant=T, purpose="support").text == "back in the tenant"
        # the same hash, no longer live, counts as residue until the maintenance removes it
        again = s.forget(tenant=T, subject=NAME)
        assert _kinds(s, again.handle, pg_db).get("name_h", 0) > 0
        assert s.wait(again.handle, 60, until="erased").erased
        assert s.verify(again.handle).level == "erased"
