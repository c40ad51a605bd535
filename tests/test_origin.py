"""The origin contract, below the store: atomic transactions, one state per snapshot, epochs
that only grow, record ids never reused. Runs on every origin implementation."""

from __future__ import annotations

import os
import threading

import pytest

from efface.origin.base import NewRecord
from efface.origin.ledger import GENESIS, chain_hash

ORIGINS = ("sqlite", "memory", "postgres")


@pytest.fixture(params=ORIGINS)
def origin(request, tmp_path):
    pg_stores = None
    if request.param == "sqlite":
        from efface.origin.sqlite import SQLiteOrigin

        o = SQLiteOrigin(os.fspath(tmp_path / "origin.db"))
    elif request.param == "postgres":
        from efface.origin.postgres.origin import PostgresOrigin

        from conftest import PgStores

        pg_stores = PgStores(request.getfixturevalue("pg"), tmp_path)
        o = PostgresOrigin(pg_stores.url("o"), dim=4, kek_file=pg_stores.kek_file)
    else:
        from efface.origin.memory import MemoryOrigin

        o = MemoryOrigin()
    yield o
    o.close()
    if pg_stores is not None:
        pg_stores.drop()


def rec(key: str, text: str, subject: str = "alice", purpose: str = "support") -> NewRecord:
    return NewRecord(key, text, "{}", (), b"\0" * 16, subject, purpose, "consent", None)


def write(origin, key: str, text: str, now: float = 1.0) -> int:
    with origin.transaction("write", "acme", now) as tx:
        rid = tx.upsert("acme", rec(key, text), now)
        tx.register_purpose("acme", "support")
        tx.log_changes("acme", [rid], [])
        origin.text.stage(tx, "acme", [rid], [], {rid: text})
    return rid


def test_a_failed_transaction_leaves_nothing(origin):
    write(origin, "k1", "first words")
    epoch = origin.current_epoch()
    with pytest.raises(RuntimeError), origin.transaction("write", "acme", 2.0) as tx:
        rid = tx.upsert("acme", rec("k2", "second words"), 2.0)
        tx.log_changes("acme", [rid], [])
        origin.text.stage(tx, "acme", [rid], [], {rid: "second words"})
        tx.append_ledger("forget", "h", {"x": 1}, 2.0)
        raise RuntimeError("boom")
    assert origin.current_epoch() == epoch
    assert origin.read("acme", "k2", "support", 3.0) is None
    assert origin.ledger() == []
    assert origin.text.search(["second"], "acme", "support", None, 3.0, 10, 10) == []
    assert [c[1] for c in origin.changes_since(0)] == [1]


def test_epochs_grow_and_record_ids_are_never_reused(origin):
    a = write(origin, "k1", "one")
    e1 = origin.current_epoch()
    with origin.transaction("forget", "acme", 2.0) as tx:
        tx.erase_records([a])
    assert origin.current_epoch() > e1
    b = write(origin, "k1", "one again")
    assert b > a
    assert origin.residual_rows([a]) == {}


def test_a_snapshot_sees_one_state_while_a_write_commits(origin):
    write(origin, "k1", "alpha words")
    started, done = threading.Event(), threading.Event()

    def writer():
        started.wait()
        write(origin, "k2", "alpha again")
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    with origin.snapshot() as r:
        before = r.current_epoch()
        started.set()
        done.wait(10)
        assert r.current_epoch() == before
        assert r.read("acme", "k2", "support", 3.0) is None
        assert origin.text.count_matches(["alpha"], 10) == 1
    t.join()
    assert origin.read("acme", "k2", "support", 3.0) is not None
    assert origin.text.count_matches(["alpha"], 10) == 2


def test_the_word_index_matches_phrases_and_ranks(origin):
    ids = [
        write(origin, f"k{i}", t)
        for i, t in enumerate(["Zoë called about the kettle", "the kettle kettle again", "nothing here"])
    ]
    found = origin.text.search(["kettle"], "acme", "support", None, 3.0, 10, 10)
    assert found == [ids[1], ids[0]]
    assert origin.text.document_frequency(["kettle", "zoe", "absent"]) == {"kettle": 2, "zoe": 1}
    with origin.transaction("register", "acme", 4.0) as tx:
        assert [r for r, _ in tx.records_with_phrase("acme", "ZOE called")] == [ids[0]]
        assert tx.records_with_phrase("acme", "called zoe") == []
        assert tx.records_with_phrase("other", "zoe called") == []


def test_the_ledger_is_chained(origin):
    with origin.transaction("forget", "acme", 5.0) as tx:
        tx.append_ledger("forget", "h1", {"a": 1}, 5.0)
        tx.append_ledger("verify", "h1", {"level": "erased"}, 5.0)
    prev = GENESIS
    for e in origin.ledger():
        assert e["prev"] == prev
        assert e["hash"] == chain_hash(prev, e["seq"], e["at"], e["kind"], e["handle"], e["body"])
        prev = e["hash"]
    assert [e["seq"] for e in origin.ledger()] == [1, 2]


def test_live_embeddings_is_live_ids_with_their_vectors(origin):
    """Recall's one-read gate: exactly the ids live_ids passes, each with its stored vector
    (an empty one for a record without), across tenants, purposes, subjects, expiry and
    quarantine."""
    ids: dict[str, int] = {}
    with origin.transaction("write", "acme", 1.0) as tx:
        for key, tenant, subject, purpose, expires, vec in (
            ("plain", "acme", "alice", "support", None, b"\1" * 16),
            ("bob", "acme", "bob", "support", None, b"\2" * 16),
            ("sales", "acme", "alice", "sales", None, b"\3" * 16),
            ("expired", "acme", "alice", "support", 5.0, b"\4" * 16),
            ("later", "acme", "alice", "support", 50.0, b"\5" * 16),
            ("novec", "acme", "alice", "support", None, b""),
            ("held", "acme", "alice", "support", None, b"\6" * 16),
            ("other", "globex", "alice", "support", None, b"\7" * 16),
        ):
            r = NewRecord(key, f"text of {key}", "{}", (), vec, subject, purpose, "consent", expires)
            ids[key] = tx.upsert(tenant, r, 1.0)
            tx.register_purpose(tenant, purpose)
        tx.quarantine(ids["held"], "acme", "a test", "h1", 1.0)
    asked = [*ids.values(), 999_999]
    for subject in (None, "alice", "bob"):
        live = origin.live_ids(asked, "acme", "support", subject, 10.0)
        got = origin.live_embeddings(asked, "acme", "support", subject, 10.0)
        assert set(got) == live
        vectors = origin.embeddings(sorted(live))
        assert got == {i: vectors.get(i, b"") for i in live}
    got = origin.live_embeddings(asked, "acme", "support", None, 10.0)
    assert {k for k, i in ids.items() if i in got} == {"plain", "bob", "later", "novec"}
    assert got[ids["novec"]] == b"" and got[ids["later"]] == b"\5" * 16
    assert origin.live_embeddings([], "acme", "support", None, 10.0) == {}
    # more ids than one statement binds
    many = origin.live_embeddings(list(range(1, 5000)), "acme", "support", None, 10.0)
    assert many == got


def test_residual_rows_count_a_records_rows_until_it_is_erased(origin):
    from efface.origin.base import RECORD_TABLES

    a = write(origin, "k1", "one")
    b = write(origin, "k2", "two")
    rows = origin.residual_rows([a, b])
    assert rows == {"records": 2, "claims": 2}
    assert set(rows) <= {table for table, _col in RECORD_TABLES}
    with origin.transaction("forget", "acme", 2.0) as tx:
        tx.erase_records([a])
    assert origin.residual_rows([a, b]) == {"records": 1, "claims": 1}
