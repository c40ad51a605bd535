"""Every copy's state on the receipt and the status on PostgreSQL (issue #34 item 3;
docs/evidence-ladder.md, "Copies"): the server's copies named at acknowledgement, climbing
with the maintenance and the verification, the same on every server of the store; where the
data directory is not readable, ``cannot_verify`` stays on the status and the level stays
``unreadable``."""

from __future__ import annotations

import json

import efface
from efface.model import allows_erased

T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle in the north annex"
OTHER = "Ottoline Brackwater collects copper weathervanes"
SERVER = {"postgres.primary.files", "postgres.primary.wal"}


def _open(url, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def test_the_server_s_copies_climb_on_the_status_of_every_server(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        a.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        a.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        receipt = a.forget(tenant=T, subject="zq")
        assert set(receipt.copies) == {"cache", *SERVER}
        assert {c.state for c in receipt.copies.values()} == {"pending"}
        assert json.loads(json.dumps(receipt.to_dict()))["copies"]["postgres.primary.wal"]["checked_at"] is None
        st = b.status(receipt.handle)  # another server: the same copies, its own cache
        assert {k: c.state for k, c in st.copies.items()} == {"cache": "pending", **dict.fromkeys(SERVER, "pending")}
        assert a._origin.maintain()  # the maintenance, run by a: the server's copies reached
        st = b.status(receipt.handle)
        assert {st.copies[n].state for n in SERVER} == {"unchecked"}
        a.wait(receipt.handle, 60, until="erased")
        v = a.verify(receipt.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
        for s in (a, b):  # what a's verification found, read from the stored receipt
            st = s.status(receipt.handle)
            assert st.level == "erased" and allows_erased(st.copies)
            assert {k: c.state for k, c in st.copies.items()} == {k: c.state for k, c in v.copies.items()}


def test_where_the_files_are_not_readable_the_status_keeps_cannot_verify(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a", data_dir=tmp_path / "elsewhere") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        assert s.wait(receipt.handle, 60, until="erased").erased
        st = s.status(receipt.handle)
        assert {st.copies[n].state for n in SERVER} == {"unchecked"}  # maintained, not checked
        v = s.verify(receipt.handle)
        assert v.level == "unreadable" and not allows_erased(v.copies)
        st = s.status(receipt.handle)
        assert st.level == "unreadable"
        for name in SERVER:
            assert st.copies[name].state == "cannot_verify" and "not on this host" in st.copies[name].reason
            assert st.copies[name].checked_at == v.copies[name].checked_at is not None
        assert st.copies["cache"].state == "erased"


def test_a_replica_is_named_on_the_receipt_and_stays_cannot_verify(pg_db, pg_replica, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        replicas = [k for k in receipt.copies if k.startswith("postgres.replica.")]
        assert replicas and all(receipt.copies[k].state == "pending" for k in replicas)
        s.wait(receipt.handle, 60, until="erased")
        assert {s.status(receipt.handle).copies[k].state for k in replicas} == {"unchecked"}
        v = s.verify(receipt.handle)
        assert v.level == "unreadable"
        st = s.status(receipt.handle)
        assert st.level == "unreadable" and {st.copies[k].state for k in replicas} == {"cannot_verify"}
