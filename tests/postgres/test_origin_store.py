"""A store on the PostgreSQL origin (efface.origin.postgres.origin), on a real server: what the
database holds (sealed content, never clear text), what a destroyed data key leaves (nothing
readable), two stores on one database (a write by one is found by the other, a forget by one
is served by neither), and each epoch's commit LSN."""

from __future__ import annotations

import warnings

import pytest

import efface
from efface.origin.postgres import DataKeyDestroyed, KeyFileCreated, KeyFileMissing
from efface.origin.postgres.keys import ENV, Keys
from efface.origin.postgres.rows import record_aad
from efface.origin.postgres.schema import TABLES
from efface.origin.postgres.sealing import Sealer

T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle"
META = {"note": "marmalade-ledger-7731"}
IDENT = "quaxworth@example.org"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _dump(pg_db) -> str:
    """Every row of every efface table as text (bytea as hex), the way a reader of the
    database would see them."""
    out = []
    with pg_db.connect() as conn:
        for table in TABLES:
            out += [r[0] for r in conn.execute(f"SELECT row_to_json(t)::text FROM efface.{table} t")]
    return "\n".join(out)


def test_the_database_holds_no_clear_text_metadata_or_identifier(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.register_subject("zq", tenant=T, identifiers=[IDENT])
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support", metadata=META)
        s.set_policy(T, "keep", reason="kept under the Quaxworth agreement")
        assert s.read("n1", tenant=T, purpose="support").text == TEXT
        dump = _dump(pg_db)
    for needle in ("Quaxworth", "vermilion", "marmalade-ledger", IDENT, "acme"):
        assert needle not in dump
        assert needle.encode().hex() not in dump  # nor as bytea


def test_a_destroyed_key_leaves_the_sealed_text_unreadable(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        with pg_db.connect() as conn:
            tenant, key, sealed = conn.execute("SELECT tenant, key, text FROM efface.records").fetchone()
        s.forget(tenant=T, subject="zq")
    keys = Keys(kek)
    with pg_db.connect() as conn:
        keys.open(conn)
        assert conn.execute("SELECT count(*) FROM efface.data_keys WHERE subject = 'zq'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM efface.destroyed_keys").fetchone()[0] >= 1
        with pytest.raises(DataKeyDestroyed):
            Sealer(keys).open(conn, sealed, record_aad("text", tenant, key))


def test_a_record_another_subject_keeps_is_sealed_again_before_the_key_goes(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write("shared", TEXT, tenant=T, subject="zq", purpose="support")
        s.retain("shared", tenant=T, subject="bob", purpose="support", basis="consent")
        r = s.forget(tenant=T, subject="zq")
        assert r.erased == ()
        assert s.read("shared", tenant=T, purpose="support").text == TEXT
    with _open(pg_db, kek, tmp_path / "b") as again:  # a fresh process: no key in its memory
        assert again.read("shared", tenant=T, purpose="support").text == TEXT


def test_two_stores_on_one_database_see_each_others_writes_and_forgets(pg_db, kek, tmp_path):
    a = _open(pg_db, kek, tmp_path / "a")
    b = _open(pg_db, kek, tmp_path / "b")
    try:
        a.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        assert b.read("n1", tenant=T, purpose="support").text == TEXT
        hits = b.recall("vermilion kettle", tenant=T, purpose="support")
        assert [h.key for h in hits][:1] == ["n1"] and "fts" in hits[0].via
        b.write("n2", "Bob drinks oolong", tenant=T, subject="bob", purpose="support")
        assert "n2" in [h.key for h in a.recall("oolong", tenant=T, purpose="support")]
        receipt = a.forget(tenant=T, subject="zq")
        assert receipt.erased == ("n1",)
        assert b.read("n1", tenant=T, purpose="support") is None
        assert "n1" not in [h.key for h in b.recall("vermilion kettle", tenant=T, purpose="support")]
        assert b.status(receipt.handle).epoch == receipt.epoch
    finally:
        a.close()
        b.close()


def test_every_epoch_is_recorded_with_its_commit_lsn(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.forget(tenant=T, subject="zq")
    with pg_db.connect() as conn:
        rows = conn.execute("SELECT epoch, commit_lsn FROM efface.mutations ORDER BY epoch").fetchall()
    assert [e for e, _ in rows] == list(range(1, len(rows) + 1)) and len(rows) >= 2
    assert all(lsn is not None for _, lsn in rows)


def test_the_key_file_may_come_from_the_environment_and_a_missing_one_is_refused(pg_db, kek, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(efface.EffaceError, match="key-encryption key file"):
        efface.open(pg_db.url, embedder="hashing", background=False, cache_dir=tmp_path / "x")
    monkeypatch.setenv(ENV, str(kek))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file exists: no warning to back it up
        with efface.open(pg_db.url, embedder="hashing", background=False, cache_dir=tmp_path / "a") as s:
            s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
            assert s.read("n1", tenant=T, purpose="support").text == TEXT


def test_a_key_file_that_cannot_be_created_is_a_typed_error_and_leaves_the_store_unmade(pg_db, tmp_path):
    """A new store's key file named in a directory that does not exist raised a raw
    ``FileNotFoundError`` from deep in the key file's creation."""
    where = tmp_path / "no-such-dir" / "efface.kek"
    with pytest.raises(KeyFileMissing, match="could not be created") as err:
        efface.open(pg_db.url, embedder="hashing", background=False, kek_file=where, cache_dir=tmp_path / "a")
    assert "create its directory" in str(err.value)
    assert not where.parent.exists()
    good = tmp_path / "efface.kek"  # the database took nothing from the failed first open
    with pytest.warns(KeyFileCreated):
        s = efface.open(pg_db.url, embedder="hashing", background=False, kek_file=good, cache_dir=tmp_path / "b")
    with s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        assert s.read("n1", tenant=T, purpose="support").text == TEXT


@pytest.mark.parametrize("schema", ["Bad", "a b", "x;drop", "", "s" * 64])
def test_a_schema_name_that_is_not_a_plain_identifier_is_invalid_input(pg_db, kek, tmp_path, schema):
    """It raised a bare ``ValueError``, not an efface error."""
    with pytest.raises(efface.InvalidInput, match="schema name"):
        efface.open(pg_db.url, embedder="hashing", background=False, kek_file=kek, cache_dir=tmp_path, schema=schema)


@pytest.mark.parametrize("name", ["kek_file", "cache_dir", "data_dir"])
@pytest.mark.parametrize("value", [5, b"/tmp/bytes", "/tmp/a\x00b"], ids=["int", "bytes", "NUL"])
def test_a_path_option_that_is_not_a_path_is_invalid_input(pg_db, kek, tmp_path, name, value):
    """kek_file=5 or cache_dir=5 raised os.fspath's raw TypeError."""
    options = {"kek_file": kek, "cache_dir": tmp_path / "c", name: value}
    with pytest.raises(efface.InvalidInput, match=name):
        efface.open(pg_db.url, embedder="hashing", background=False, **options)


def test_a_default_cache_directory_is_per_process_and_removed_at_close(pg_db, kek, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    s = efface.open(pg_db.url, embedder="hashing", background=False, kek_file=kek)
    where = s.path
    assert where.startswith(str(tmp_path / "cache" / "efface" / "postgres"))
    s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
    s.close()
    assert not (tmp_path / "cache" / "efface" / "postgres").exists() or not list(
        (tmp_path / "cache" / "efface" / "postgres").iterdir()
    )


def test_the_change_log_is_pruned_only_as_far_as_every_open_store_has_replayed_it(pg_db, kek, tmp_path):
    def log_epochs() -> list[int]:
        with pg_db.connect() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT epoch FROM efface.changes ORDER BY 1")]

    a = _open(pg_db, kek, tmp_path / "a")
    try:
        for i in range(3):
            a.write(f"n{i}", f"note {i} about quill{i}", tenant=T, subject="zq", purpose="support")
        b = _open(pg_db, kek, tmp_path / "b")  # replays from here on: epoch 3
        a.write("n3", "note 3 about quill3", tenant=T, subject="zq", purpose="support")
        a.compact()
        assert log_epochs() == [4]  # b has not replayed epoch 4 yet: a leaves it
        assert [h.key for h in b.recall("quill3", tenant=T, purpose="support")][:1] == ["n3"]
        b.close()
        a.compact()
        assert log_epochs() == []  # no other reader left
        # a new store opened after the log was pruned finds every record by its vector too
        with _open(pg_db, kek, tmp_path / "c") as c:
            hits = c.recall("note 0 about quill0", tenant=T, purpose="support")
            assert hits[0].key == "n0" and "ann" in hits[0].via
    finally:
        a.close()


def test_verify_on_postgres_never_claims_erased_by_assumption(pg_db, kek, tmp_path):
    """A forget is unreadable at once from every store on the database; until the maintenance
    that removes the bytes has run past it (``wait(..., until="erased")``, ``compact()``,
    or the compactor), verify stops at ``unreadable`` and says why, per copy."""
    with _open(pg_db, kek, tmp_path / "a", background=False) as a, _open(pg_db, kek, tmp_path / "b") as b:
        a.write("k", "Alice prefers green tea", tenant="t", subject="alice", purpose="p")
        receipt = a.forget(tenant="t", subject="alice")
        assert b.read("k", tenant="t", purpose="p") is None  # the other store's next read
        a.wait(receipt.handle, 30, until="absorbed")
        v = a.verify(receipt.handle)
        assert v.level == "unreadable"
        own = [c for c in v.checks if c.name == "origin.maintenance"]
        assert [c.outcome for c in own] == ["fail"]
        assert v.copies["postgres.primary.files"].state == "cannot_verify"
        assert "has not run past this erasure" in v.copies["postgres.primary.wal"].reason
        assert "origin.wal" not in {c.name for c in v.checks}
        a.wait(receipt.handle, 30)  # the maintenance runs; the server's files are scanned
        assert a.verify(receipt.handle).level == "erased"


def test_a_cache_directory_serves_one_store_at_a_time(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a"):
        with pytest.raises(efface.StoreLocked, match="give each process its own cache_dir"):
            _open(pg_db, kek, tmp_path / "a")
        with _open(pg_db, kek, tmp_path / "b") as other:  # another cache directory: the same database
            assert other.stats()["records"] == 0
    with _open(pg_db, kek, tmp_path / "a"):  # let go at close
        pass
