"""The origin contract, below the store: atomic transactions, one state per snapshot, epochs
that only grow, record ids never reused. Runs on every origin implementation."""

from __future__ import annotations

import os
import threading

import pytest

from efface.origin.base import NewRecord
from efface.origin.ledger import GENESIS, chain_hash

ORIGINS = ("sqlite", "memory")


@pytest.fixture(params=ORIGINS)
def origin(request, tmp_path):
    if request.param == "sqlite":
        from efface.origin.sqlite import SQLiteOrigin

        o = SQLiteOrigin(os.fspath(tmp_path / "origin.db"))
    else:
        from efface.origin.memory import MemoryOrigin

        o = MemoryOrigin()
    yield o
    o.close()


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
