"""The store's hash secret on PostgreSQL lives in the KEK file, never in the database (issue #34
item 3; :mod:`efface.origin.postgres.hashsecret`): a new store never writes it there, an older
database's moves into the file (the same value, so its hashes, ledger and receipts stay valid)
and the maintenance after the move clears its old bytes from the server's files and WAL; a
file without it, or with another, is refused; a rotation keeps it; several processes agree."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
import textwrap
import warnings

import pytest

import efface
from efface.origin.ledger import SECRET_META
from efface.origin.postgres import KeyFileCreated, KeyFileMismatch, kekring, maintenance
from efface.origin.postgres.hashsecret import MOVED_KIND, SECRET_ID_META, STORE_ID_META, derived
from efface.origin.postgres.kekfile import KekFile, hash_secret_id
from efface.origin.postgres.keys import Keys
from efface.origin.postgres.schema import TABLES

from .filescan import files_holding

T = "acme-tenant"
OTHER_T = "globex-tenant"
NAME = "carol-subject"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _write(s) -> None:
    for i in range(3):
        s.write(f"note-{i}", f"carol's order {i} shipped", tenant=T, subject=NAME, purpose="support")
    s.write("other", "an unrelated note", tenant=OTHER_T, subject=NAME, purpose="support")


def _dump(pg_db) -> str:
    out = []
    with pg_db.connect() as conn:
        for table in TABLES:
            out += [r[0] for r in conn.execute(f"SELECT row_to_json(t)::text FROM efface.{table} t")]
    return "\n".join(out)


def _meta(pg_db, key: str) -> str | None:
    with pg_db.connect() as conn:
        row = conn.execute("SELECT v FROM efface.meta WHERE k = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def _forms(secret: bytes) -> list[bytes]:
    """The forms the secret could take in the server's bytes: as meta held it (hex), raw."""
    return [secret.hex().encode("ascii"), secret]


def _to_older_database(pg_db, kek, secret: bytes) -> None:
    """Make the database and the file what efface wrote before migration 7: the secret in
    ``meta`` (hex), no check value, a file without it. The store's id changes, so the secret
    (random, when efface made it in ``meta``) is not the one this efface would derive."""
    with pg_db.connect() as conn:
        conn.execute("INSERT INTO efface.meta(k, v) VALUES (%s, %s)", (SECRET_META, secret.hex()))
        conn.execute("DELETE FROM efface.meta WHERE k = %s", (SECRET_ID_META,))
        conn.execute("UPDATE efface.meta SET v = %s WHERE k = %s", (secrets.token_hex(16), STORE_ID_META))
        conn.execute("UPDATE efface.meta SET v = '6' WHERE k = 'schema_version'")
        # as autovacuum does on a meta table updated often: ANALYZE samples its values (the
        # secret's among them: under 100 rows, the histogram holds every one) into pg_statistic
        conn.execute("ALTER TABLE efface.meta ALTER COLUMN v SET STATISTICS -1")
        conn.execute("ANALYZE efface.meta")
        (sampled,) = conn.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'efface' AND tablename = 'meta' AND attname = 'v'"
            " AND histogram_bounds::text LIKE %s",
            (f"%{secret.hex()}%",),
        ).fetchone()
        assert sampled == 1
    doc = json.loads(kek.read_text())
    doc.pop("hash_secrets", None)
    kek.write_text(json.dumps(doc))
    assert derived(KekFile(kek).name_key(), _meta(pg_db, STORE_ID_META)) != secret


def _held(pg_db, kek) -> bytes | None:
    """The file's copy of the store's hash secret (a moved one's), else None."""
    return KekFile(kek).hash_secret(_meta(pg_db, STORE_ID_META))


def _moves(pg_db) -> int:
    with pg_db.connect() as conn:
        return int(conn.execute("SELECT count(*) FROM efface.mutations WHERE kind = %s", (MOVED_KIND,)).fetchone()[0])


def test_a_new_store_derives_its_hash_secret_from_the_file_and_never_writes_it_to_the_database(pg_db, kek, tmp_path):
    before = kek.read_bytes()
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        secret = derived(KekFile(kek).name_key(), _meta(pg_db, STORE_ID_META))
        assert s._secret == secret, "every keyed hash of the store is made with the secret the file gives"
        assert kek.read_bytes() == before, "nothing added to the file: a copy made before the first use holds it"
        r = s.forget(tenant=T, subject=NAME)
        assert s.wait(r.handle, 60, until="erased").erased
        assert _meta(pg_db, SECRET_META) is None
        assert _meta(pg_db, SECRET_ID_META) == hash_secret_id(secret)
        assert secret.hex() not in _dump(pg_db)
        assert files_holding(pg_db, _forms(secret)) == {}, "not a byte of it in the database's files or the WAL"
    with _open(pg_db, kek, tmp_path / "b") as again:  # a reopen finds the same secret
        assert again._secret == secret
        assert len(again.receipts(T)) == 1 and again.verify_ledger().ok


def test_an_older_databases_secret_moves_into_the_file_and_the_maintenance_clears_its_bytes(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        r = s.forget(tenant=T, subject=NAME)
        assert s.wait(r.handle, 60, until="erased").erased
        secret, tenant_id = s._secret, s._tenant(T)
    _to_older_database(pg_db, kek, secret)
    assert files_holding(pg_db, _forms(secret)), "the older database's secret is in its files (the test's premise)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = _open(pg_db, kek, tmp_path / "b")
    assert any(issubclass(w.category, KeyFileCreated) and "hash secret" in str(w.message) for w in caught)
    with s:
        assert _held(pg_db, kek) == secret, "the same value: every hash stays valid"
        assert _meta(pg_db, SECRET_META) is None and _meta(pg_db, SECRET_ID_META) == hash_secret_id(secret)
        assert _moves(pg_db) == 1
        assert s._secret == secret and s._tenant(T) == tenant_id
        assert s.read("other", tenant=OTHER_T, purpose="support").text == "an unrelated note"
        assert [x["handle"] for x in s.receipts(T)] == [r.handle], "the receipt is found by the tenant's hash"
        assert s.verify_ledger().ok
        assert s.verify(r.handle).level == "erased"
        assert s._origin.maintain(), "the move owes a maintenance"
        with pg_db.connect() as conn:
            report = maintenance.note(conn, "efface")
        assert "meta" in report["rewritten"] and not report["lacking"], report
        with pg_db.connect() as conn:
            assert not conn.execute(
                "SELECT 1 FROM pg_stats WHERE schemaname = 'efface' AND tablename = 'meta' AND attname = 'v'"
            ).fetchone(), "the sampled statistics are gone"
        assert report.get("wal_rounds", 0) > 0, report
        assert files_holding(pg_db, _forms(secret)) == {}, "the maintenance after the move left none of its bytes"
        # and the store works on: a new erasure is proven erased
        s.write("late", "a later note", tenant=T, subject="dave", purpose="support")
        late = s.forget(tenant=T, subject="dave")
        assert s.wait(late.handle, 60, until="erased").erased
    with pg_db.connect() as conn:
        (stat,) = conn.execute(
            "SELECT attstattarget FROM pg_attribute WHERE attrelid = 'efface.meta'::regclass AND attname = 'v'"
        ).fetchone()
    assert stat == 0, "ANALYZE never samples meta's values into pg_statistic"


def test_a_crash_between_the_file_and_the_database_is_finished_at_the_next_open(pg_db, kek, tmp_path):
    """The move writes the file first: a crash before the database's transaction leaves the
    row and a file holding the same value, which the next open finds equal and finishes."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        secret = s._secret
    _to_older_database(pg_db, kek, secret)
    KekFile(kek).add_hash_secret(_meta(pg_db, STORE_ID_META), secret)  # the file's half only
    with warnings.catch_warnings():
        warnings.simplefilter("error", KeyFileCreated)  # nothing to add to the file this time
        s = _open(pg_db, kek, tmp_path / "b")
    with s:
        assert s._secret == secret and _meta(pg_db, SECRET_META) is None and _moves(pg_db) == 1
        assert s.read("note-1", tenant=T, purpose="support").text == "carol's order 1 shipped"


def test_a_file_without_the_stores_hash_secret_or_with_another_is_refused(pg_db, kek, tmp_path, monkeypatch):
    monkeypatch.setattr(kekring, "KEK_WAIT_S", 0.2)
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        secret = s._secret
    store = _meta(pg_db, STORE_ID_META)
    other = tmp_path / "other.kek"
    doc = json.loads(kek.read_text())
    # a derived secret: another one written for the store in the file is refused
    doc["hash_secrets"] = {store: base64.b64encode(secrets.token_bytes(32)).decode()}
    other.write_text(json.dumps(doc))
    with pytest.raises(KeyFileMismatch, match="hash secret"):
        _open(pg_db, other, tmp_path / "b")
    # a moved secret: a file without it (a copy from before the move), or with another, is refused
    _to_older_database(pg_db, kek, secret)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KeyFileCreated)
        _open(pg_db, kek, tmp_path / "c").close()
    store = _meta(pg_db, STORE_ID_META)
    assert _held(pg_db, kek) == secret
    doc = json.loads(kek.read_text())
    for hashing in ({store: base64.b64encode(secrets.token_bytes(32)).decode()}, None):  # another; none
        if hashing is None:
            doc.pop("hash_secrets")
        else:
            doc["hash_secrets"] = hashing
        other.write_text(json.dumps(doc))
        with pytest.raises(KeyFileMismatch, match="hash secret"):
            _open(pg_db, other, tmp_path / "d")
        with pg_db.connect() as conn, pytest.raises(KeyFileMismatch, match="hash secret"):
            Keys(other).open(conn)
    assert KekFile(other).hash_secret(store) is None, "never a new secret where the database names one"
    # an older database whose secret is in meta, opened with a file holding another: refused, nothing moved
    with pg_db.connect() as conn:
        conn.execute("INSERT INTO efface.meta(k, v) VALUES (%s, %s)", (SECRET_META, secret.hex()))
    doc["hash_secrets"] = {store: base64.b64encode(secrets.token_bytes(32)).decode()}
    other.write_text(json.dumps(doc))
    with pytest.raises(KeyFileMismatch, match="another hash secret"):
        _open(pg_db, other, tmp_path / "e")
    assert _meta(pg_db, SECRET_META) == secret.hex(), "nothing moved"


def test_a_kek_rotation_keeps_the_hash_secret(pg_db, kek, tmp_path):
    """Derived (from the name key, which rotations keep) or moved (the file's copy, which
    a rotation's rewrites of the file keep): the same after a rotation."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        secret = s._secret
        with s._origin._pool.connection() as conn:
            assert s._origin._keys.rotate(conn).retired
    with _open(pg_db, kek, tmp_path / "b") as again:
        assert again._secret == secret
    _to_older_database(pg_db, kek, secret)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KeyFileCreated)
        moved = _open(pg_db, kek, tmp_path / "c")
    with moved:
        with moved._origin._pool.connection() as conn:
            assert moved._origin._keys.rotate(conn).retired
        assert _held(pg_db, kek) == secret
    with _open(pg_db, kek, tmp_path / "d") as again:
        assert again._secret == secret
        assert [m.key for m in again.scan(tenant=T, purpose="support", subject=NAME)] == [f"note-{i}" for i in range(3)]


OPENER = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("ignore")
    import efface
    url, kek, cache, go = sys.argv[1:]
    while not __import__("os").path.exists(go):
        __import__("time").sleep(0.01)
    with efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False) as s:
        print(s._secret.hex(), s._tenant("acme-tenant"), len(s.receipts("acme-tenant")), flush=True)
    """
)


def test_several_processes_opening_an_older_database_at_once_move_the_secret_once_and_agree(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.forget(tenant=T, subject=NAME)
        secret, tenant_id = s._secret, s._tenant(T)
    _to_older_database(pg_db, kek, secret)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, pg_db.url, str(kek), str(tmp_path / f"p{i}"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(3)
    ]
    go.touch()  # all at once
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
        outs.append(out.decode().split())
    assert outs == [[secret.hex(), tenant_id, "1"]] * 3
    assert _held(pg_db, kek) == secret
    assert _meta(pg_db, SECRET_META) is None and _moves(pg_db) == 1


def test_live_names_reads_only_the_erasures_tenant(pg_db, kek, tmp_path):
    """The verifier's live name hashes (:func:`maintenance.live_names`) are the erasure's
    tenant's only: a name's hash is keyed by its tenant, so the same subject in another tenant
    has another hash, and leaving it out changes no judgement."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.write("bob", "bob's note", tenant=T, subject="bob", purpose="support")
        keys = s._origin._keys
        tid, other_id = s._tenant(T), s._tenant(OTHER_T)
        here = {keys.name_h("subject", tid, n).encode() for n in (NAME, "bob")}
        there = keys.name_h("subject", other_id, NAME).encode()
        with pg_db.connect() as conn:
            mine = set(maintenance.live_names(conn, "efface", tid))
            every = set(maintenance.live_names(conn, "efface", None))
        assert here <= mine and there not in mine and there in every
        assert mine < every
        r = s.forget(tenant=T, subject=NAME)
        with pg_db.connect() as conn:
            assert maintenance.erasure_tenant(conn, "efface", r.epoch) == tid
            after = set(maintenance.live_names(conn, "efface", tid))
        assert keys.name_h("subject", tid, NAME).encode() not in after
        assert keys.name_h("subject", tid, "bob").encode() in after
        assert s.wait(r.handle, 60, until="erased").erased
        v = s.verify(r.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
