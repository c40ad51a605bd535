"""Keys on PostgreSQL (efface.origin.postgres.keys): the KEK file, sealing, destruction and
rotation, on a real server."""

from __future__ import annotations

import contextlib
import os
import stat
import time

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from efface.errors import EffaceError, NotFound, StoreDamaged
from efface.origin.postgres import DataKeyDestroyed, KeyFileCreated, KeyFileMismatch, KeyFileMissing
from efface.origin.postgres.kekring import _WRAP_AAD
from efface.origin.postgres.keys import ENV, NONCE_LEN, KekFile, Keys, kek_id
from efface.origin.postgres.schema import migrate

TEXT = b"Alice prefers green tea"


@pytest.fixture
def db(pg_db):
    with pg_db.connect() as conn:
        migrate(conn, dim=4)
    return pg_db


@pytest.fixture
def kek_path(tmp_path):
    return tmp_path / "store.kek"


def _opened(conn, path) -> Keys:
    keys = Keys(path)
    with pytest.warns(KeyFileCreated) if not path.exists() else contextlib.nullcontext():
        keys.open(conn)
    return keys


def test_first_use_creates_the_file_and_warns(db, kek_path):
    with db.connect() as conn:
        with pytest.warns(KeyFileCreated, match="back this file up"):
            current = Keys(kek_path).open(conn)
        assert stat.S_IMODE(os.stat(kek_path).st_mode) == 0o600
        assert list(KekFile(kek_path).keys()) == [current]
        # the database holds the key's check value, never the key
        key = KekFile(kek_path).keys()[current]
        assert conn.execute("SELECT kek_id FROM efface.keks").fetchall() == [(current,)]
        dump = b"".join(bytes(str(r), "utf-8") for r in conn.execute("SELECT * FROM efface.keks"))
        assert key.hex().encode() not in dump
        # a second server with the same file opens without a new key or a warning
        assert Keys(kek_path).open(conn) == current
        assert list(KekFile(kek_path).keys()) == [current]


def test_seal_and_open(db, kek_path):
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        with conn.transaction():
            kid = keys.ensure(conn, "t1", "subject-h-1", 1.0)
            assert keys.ensure(conn, "t1", "subject-h-1", 2.0) == kid  # one key per subject
            other = keys.ensure(conn, "t1", "subject-h-2", 1.0)
        assert other != kid
        sealed = keys.seal(conn, kid, TEXT, b"records.text|1")
        assert TEXT not in sealed
        assert keys.open_sealed(conn, sealed, b"records.text|1") == TEXT
        # bound to where it is stored: the same bytes under another row's context do not open
        with pytest.raises(StoreDamaged):
            keys.open_sealed(conn, sealed, b"records.text|2")
        tampered = bytearray(sealed)
        tampered[-1] ^= 1
        with pytest.raises(StoreDamaged):
            keys.open_sealed(conn, bytes(tampered), b"records.text|1")
        # the wrapped data key in the database is not the data key
        wrapped = conn.execute("SELECT wrapped FROM efface.data_keys WHERE kid = %s", (kid,)).fetchone()[0]
        assert len(bytes(wrapped)) == NONCE_LEN + 32 + 16


def test_a_destroyed_key_makes_ciphertext_unreadable(db, kek_path):
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        kid = keys.ensure(conn, "t1", "sh", 1.0)
        kept = keys.ensure(conn, "t1", "sh-other", 1.0)
        sealed = keys.seal(conn, kid, TEXT, b"a")
        sealed_other = keys.seal(conn, kept, TEXT, b"b")
        with conn.transaction():
            assert keys.destroy(conn, "t1", "sh", 2.0) == kid
        assert keys.destroy(conn, "t1", "sh", 3.0) is None
        with pytest.raises(DataKeyDestroyed) as e:
            keys.open_sealed(conn, sealed, b"a")
        assert isinstance(e.value, NotFound)
        assert keys.open_sealed(conn, sealed_other, b"b") == TEXT
        assert keys.pending_destroyed(conn) == 1


def test_rotation_makes_leftover_wrapped_keys_useless(db, kek_path):
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        old_kek = keys.open(conn)
        kids = [keys.ensure(conn, "t1", f"s{i}", 1.0) for i in range(7)]
        sealed = {kid: keys.seal(conn, kid, TEXT + bytes([i]), kid) for i, kid in enumerate(kids)}
        # what a heap page, the WAL or a backup keeps of the doomed key: its wrapped bytes
        doomed = kids[0]
        leftover = bytes(conn.execute("SELECT wrapped FROM efface.data_keys WHERE kid = %s", (doomed,)).fetchone()[0])
        old_key = KekFile(kek_path).keys()[old_kek]
        # before the rotation, the old KEK opens the leftover copy: destroying the row is not enough
        nonce, body = leftover[:NONCE_LEN], leftover[NONCE_LEN:]
        assert len(AESGCM(old_key).decrypt(nonce, body, _WRAP_AAD + doomed)) == 32
        with conn.transaction():
            keys.destroy(conn, "t1", "s0", 2.0)
        assert keys.pending_destroyed(conn) == 1
        seen = []
        rotation = keys.rotate(conn, batch=2, after_batch=seen.append)
        assert rotation.rewrapped == 6 and rotation.batches == 3 and seen == [1, 2, 3]
        assert rotation.retired == (old_kek,) and rotation.covered == 1
        assert keys.pending_destroyed(conn) == 0
        # the old KEK is gone from the file; only the new one is there
        in_file = KekFile(kek_path).keys()
        assert list(in_file) == [rotation.new_kek] and old_kek not in in_file
        assert old_key not in kek_path.read_bytes()
        # no key the store still has opens the leftover copy
        for key in in_file.values():
            with pytest.raises(InvalidTag):
                AESGCM(key).decrypt(nonce, body, _WRAP_AAD + doomed)
        # live content still opens, under data keys now wrapped by the new KEK
        for kid in kids[1:]:
            assert keys.open_sealed(conn, sealed[kid], kid).startswith(TEXT)
        states = dict(conn.execute("SELECT kek_id, state FROM efface.keks").fetchall())
        assert states == {old_kek: "retired", rotation.new_kek: "current"}
        assert conn.execute("SELECT DISTINCT kek_id FROM efface.data_keys").fetchall() == [(rotation.new_kek,)]


def test_an_interrupted_rotation_resumes(db, kek_path):
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        old_kek = keys.open(conn)
        kids = [keys.ensure(conn, "t1", f"s{i}", 1.0) for i in range(5)]
        sealed = {kid: keys.seal(conn, kid, TEXT, kid) for kid in kids}

        class Crash(Exception):
            pass

        def crash(n):
            raise Crash

        with pytest.raises(Crash):
            keys.rotate(conn, batch=2, after_batch=crash)
        # mid-rotation: the file holds both KEKs, the keys are wrapped by one or the other
        assert len(KekFile(kek_path).keys()) == 2
        other = Keys(kek_path)  # another server, meanwhile
        assert other.open(conn) == old_kek
        for kid in kids:
            assert other.open_sealed(conn, sealed[kid], kid) == TEXT
        done = Keys(kek_path).rotate(conn, batch=2)
        assert done.rewrapped == 3 and done.retired == (old_kek,)
        assert list(KekFile(kek_path).keys()) == [done.new_kek]
        for kid in kids:
            assert other.open_sealed(conn, sealed[kid], kid) == TEXT  # it reloads the changed file


def test_missing_or_wrong_key_file_is_a_typed_error(db, kek_path, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(KeyFileMissing, match="--kek-file"):
        Keys(None)
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        kid = keys.ensure(conn, "t1", "s", 1.0)
        sealed = keys.seal(conn, kid, TEXT, b"x")
        # named by the environment variable instead of the option
        monkeypatch.setenv(ENV, str(kek_path))
        assert Keys(None).open_sealed(conn, sealed, b"x") == TEXT
        # another store's file: refused, not used, not replaced
        foreign = tmp_path / "other.kek"
        KekFile(foreign).create(os.urandom(32))
        before = foreign.read_bytes()
        with pytest.raises(KeyFileMismatch) as e:
            Keys(foreign).open(conn)
        assert e.value.expected == kek_id(KekFile(kek_path).keys()[e.value.expected])
        assert foreign.read_bytes() == before
        with pytest.raises(KeyFileMismatch):
            Keys(foreign).open_sealed(conn, sealed, b"x")
        # a missing file once the store has keys: refused, and no new file made
        gone = tmp_path / "gone.kek"
        with pytest.raises(KeyFileMissing, match="restore"):
            Keys(gone).open(conn)
        assert not gone.exists()
        # a file that is not a key file
        junk = tmp_path / "junk.kek"
        junk.write_text("not json")
        with pytest.raises(KeyFileMismatch):
            Keys(junk).open(conn)
    for err in (KeyFileMissing, KeyFileMismatch):
        assert issubclass(err, EffaceError)


def test_messages_hold_no_key_material(db, kek_path, tmp_path):
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        key = next(iter(KekFile(kek_path).keys().values()))
        foreign = tmp_path / "f.kek"
        KekFile(foreign).create(os.urandom(32))
        with pytest.raises(KeyFileMismatch) as e:
            Keys(foreign).open(conn)
        text = str(e.value)
        for form in (key.hex(), key.hex().upper()):
            assert form not in text
        assert keys.open(conn)


def _files_holding(root, needles: dict[str, bytes]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {name: [] for name in needles}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for name, needle in needles.items():
            if needle in data:
                found[name].append(str(path.relative_to(root)))
    return found


def test_neither_keys_nor_sealed_text_reach_the_servers_files(db, pg, kek_path):
    """The KEK never enters the database; sealed text never reaches it in clear: a byte scan
    of the database's files and the whole WAL, after a rotation, finds neither."""
    marker = b"efface-sealed-marker-" + os.urandom(8).hex().encode()
    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        first_kek = next(iter(KekFile(kek_path).keys().values()))
        conn.execute("CREATE TABLE sealed(id int, body bytea)")
        kid = keys.ensure(conn, "t1", "s", 1.0)
        conn.execute("INSERT INTO sealed VALUES (1, %s)", (keys.seal(conn, kid, marker, b"sealed|1"),))
        keys.rotate(conn)
        second_kek = next(iter(KekFile(kek_path).keys().values()))
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
        conn.execute("CHECKPOINT")
        assert keys.open_sealed(conn, conn.execute("SELECT body FROM sealed").fetchone()[0], b"sealed|1") == marker
    needles = {"plaintext": marker, "old KEK": first_kek, "new KEK": second_kek}
    for where in (pg.datadir / "base" / str(dboid), pg.datadir / "pg_wal"):
        assert _files_holding(where, needles) == {name: [] for name in needles}, where.name
    # the scan can find what is there: the same bytes written in clear are found
    with db.connect() as conn:
        conn.execute("INSERT INTO sealed VALUES (2, %s)", (marker,))
        conn.execute("CHECKPOINT")
    assert _files_holding(pg.datadir / "base" / str(dboid), {"plaintext": marker})["plaintext"]


def _until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def _keep_creating(dsn, keys_path, stop, made, errors):
    import psycopg

    keys = Keys(keys_path)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            n = 0
            while not stop.is_set():
                with conn.transaction():
                    made.append(keys.ensure(conn, "t2", f"writer-{n}", 1.0))
                n += 1
    except Exception as e:  # reported to the test, which fails on it
        errors.append(e)


def test_rotation_beside_writers_leaves_no_key_under_the_old_kek(db, kek_path):
    import threading

    with db.connect() as conn:
        keys = _opened(conn, kek_path)
        for i in range(40):
            keys.ensure(conn, "t1", f"s{i}", 1.0)
        stop, made, errors = threading.Event(), [], []
        writer = threading.Thread(target=_keep_creating, args=(db.dsn, kek_path, stop, made, errors))
        writer.start()
        try:
            # the first batch waits until the writer is creating keys, so it does so mid-rotation
            rotation = keys.rotate(conn, batch=5, after_batch=lambda n: n == 1 and _until(lambda: len(made) >= 3))
        finally:
            stop.set()
            writer.join(30)
        assert not errors
        assert made, "the writer created keys while the rotation ran"
        kinds = conn.execute("SELECT DISTINCT kek_id FROM efface.data_keys").fetchall()
        assert kinds == [(rotation.new_kek,)]
        assert list(KekFile(kek_path).keys()) == [rotation.new_kek]
        for kid in made:
            assert keys.open_sealed(conn, keys.seal(conn, kid, TEXT, b"w"), b"w") == TEXT


def test_a_snapshot_from_before_a_rotation_still_opens_what_it_reads(db, kek_path, monkeypatch):
    """Regression (found by test_concurrency on postgres): a read whose snapshot began before a
    rotation committed sees data keys wrapped by the KEK the rotation retired and removed from
    the file; it failed with KeyFileMismatch. This process keeps a KEK that left the file for
    RETIRED_GRACE_S, then forgets it (the file and the database never hold it again)."""
    from efface.origin.postgres import kekfile as keys_mod

    with db.connect() as conn, db.connect() as reader:
        keys = _opened(conn, kek_path)
        old_kek = keys.open(conn)
        kids = [keys.ensure(conn, "t1", f"s{i}", 1.0) for i in range(3)]
        sealed = {kid: keys.seal(conn, kid, TEXT + bytes([i]), kid) for i, kid in enumerate(kids)}
        with conn.transaction():
            keys.destroy(conn, "t1", "s0", 2.0)
        fresh = Keys(kek_path)  # another reader of the same file, no data key cached
        with reader.transaction():
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            assert fresh.open_sealed(reader, sealed[kids[1]], kids[1]).startswith(TEXT)  # its snapshot begins
            rotation = keys.rotate(conn)
            held = KekFile(kek_path).keys()
            assert rotation.retired == (old_kek,) and old_kek not in held
            # the snapshot still sees kids[2] wrapped by the old KEK, and opens it
            assert fresh.open_sealed(reader, sealed[kids[2]], kids[2]).startswith(TEXT)
        # after the grace the old KEK is gone from this process too
        monkeypatch.setattr(keys_mod, "RETIRED_GRACE_S", 0.0)
        assert fresh.file.recently_held(old_kek) is None
        # and a fresh snapshot opens everything under the new KEK
        assert fresh.open_sealed(reader, sealed[kids[2]], kids[2]).startswith(TEXT)
