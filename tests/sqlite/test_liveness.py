"""The SQLite origin's copy of which records are live, in memory (origin/sqlite/liveness.py):
after every committed write, retain, forget, expiry, quarantine and release it answers as
SQLite does, loaded as the store opens or in the background beside writes; and recall never
serves a record that only the copy still counts live."""

from __future__ import annotations

import threading
import time

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import efface
from efface.origin.sqlite import liveness as liveness_mod
from efface.vectors import read as read_vector

from conftest import FakeClock

pytestmark = pytest.mark.sqlite_only("the SQLite origin's copy of liveness")

TENANTS = ["acme", "globex"]
SUBJECTS = ["alice", "bob", "carol"]
PURPOSES = ["support", "billing", "marketing"]
KEYS = [f"k{i}" for i in range(8)]


def disagreements(store, now: float) -> list[tuple]:
    """(tenant id, purpose, ids only the copy counts live, ids only SQLite counts live) for
    every tenant and purpose where the copy and SQLite differ."""
    o = store._origin
    r = o._r()
    (top,) = r.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
    ids = list(range(1, top + 3))
    tenants = {t for (t,) in r.execute("SELECT DISTINCT tenant FROM records")}
    purposes = {p for (p,) in r.execute("SELECT DISTINCT purpose FROM claims")} | set(PURPOSES)
    out = []
    for t in tenants:
        for p in purposes:
            mine = set(o.liveness.live(ids, t, p, now))
            truth = o.live_ids(ids, t, p, None, now)
            if mine != truth:
                out.append((t, p, sorted(mine - truth), sorted(truth - mine)))
    return out


def vector_disagreements(store) -> list[int]:
    """Record ids whose vector the copy holds when it counts them live for nothing, or does
    not hold (or holds other than the origin's) when it does, or whose row in memory is not
    zero when not held: an erased record's vector leaves memory with it."""
    o = store._origin
    copy = o.liveness
    r = o._r()
    (top,) = r.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
    stored = dict(r.execute("SELECT id, embedding FROM records").fetchall())
    bad = []
    for rid in range(1, top + 1):
        counted = rid < len(copy._tenant) and copy._tenant[rid] != -1
        held, m = copy.vectors([rid])
        if counted != bool(len(held)) or (len(held) and not np.array_equal(m[0], read_vector(stored[rid]))):
            bad.append(rid)
        elif not len(held):
            b = rid >> liveness_mod.BLOCK_BITS
            if (
                b < len(copy._blocks)
                and copy._blocks[b] is not None
                and copy._blocks[b][rid % liveness_mod.BLOCK].any()
            ):
                bad.append(rid)
    return bad


class LivenessMachine(RuleBasedStateMachine):
    """Writes, claims, forgets, expiry, quarantine and release in any order; after each, the
    copy answers as SQLite does for every record, tenant and purpose, now and later."""

    def __init__(self):
        super().__init__()
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        self.clock = FakeClock()
        self.store = efface.open(self._dir.name, embedder="hashing", background=False, clock=self.clock)
        assert self.store._origin.liveness.usable(None)

    def teardown(self):
        self.store.close()
        self._dir.cleanup()

    @rule(
        tenant=st.sampled_from(TENANTS),
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
        subject=st.sampled_from(SUBJECTS),
        purpose=st.sampled_from(PURPOSES),
        ttl=st.sampled_from([None, None, 30, 300]),
        derived=st.booleans(),
    )
    def write(self, tenant, keys, subject, purpose, ttl, derived):
        items = [{"key": k, "text": f"note {k} about {subject}"} for k in keys]
        if derived and len(keys) > 1:  # the last one derived from the first: quarantined when it goes
            items[-1]["sources"] = [keys[0]]
        try:
            self.store.write_many(items, tenant=tenant, subject=subject, purpose=purpose, ttl=ttl, replace=True)
        except efface.EffaceError:
            pass  # a refused write (a key under hold, a source in the batch's own erasure) changes nothing

    @rule(
        tenant=st.sampled_from(TENANTS),
        key=st.sampled_from(KEYS),
        subject=st.sampled_from(SUBJECTS),
        purpose=st.sampled_from(PURPOSES),
        ttl=st.sampled_from([None, 60]),
    )
    def retain(self, tenant, key, subject, purpose, ttl):
        try:
            self.store.retain(key, tenant=tenant, subject=subject, purpose=purpose, basis="contract", ttl=ttl)
        except efface.EffaceError:
            pass  # no such record

    @rule(
        tenant=st.sampled_from(TENANTS), subject=st.sampled_from(SUBJECTS), purpose=st.sampled_from([None, *PURPOSES])
    )
    def forget_subject(self, tenant, subject, purpose):
        try:
            self.store.forget(tenant=tenant, subject=subject, purpose=purpose)
        except efface.EffaceError:
            pass  # a purpose the tenant never used

    @rule(tenant=st.sampled_from(TENANTS), key=st.sampled_from(KEYS))
    def forget_key(self, tenant, key):
        self.store.forget(tenant=tenant, key=key)

    @rule(tenant=st.sampled_from(TENANTS), key=st.sampled_from(KEYS))
    def release(self, tenant, key):
        try:
            self.store.release(key, tenant=tenant, reason="checked by hand")
        except efface.EffaceError:
            pass  # not quarantined

    @rule(seconds=st.sampled_from([10, 45, 100, 400]), sweep=st.booleans())
    def tick(self, seconds, sweep):
        self.clock.advance(seconds)
        if sweep:
            self.store.sweep()

    @invariant()
    def the_copy_answers_as_sqlite(self):
        for later in (0.0, 40.0, 1000.0):
            assert disagreements(self.store, self.clock.now + later) == []
        assert vector_disagreements(self.store) == []


TestLiveness = LivenessMachine.TestCase
TestLiveness.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)


def test_a_large_store_loads_the_copy_beside_writes_and_forgets(tmp_path, monkeypatch):
    """A store past LOAD_HERE loads the copy in the background from its first recall; what
    is committed while it loads is in it once it is ready (read again from the origin)."""
    clock = FakeClock()
    store = efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock)
    store.write_many(
        [{"key": f"a{i}", "text": f"note {i}", "subject": SUBJECTS[i % 3]} for i in range(300)],
        tenant="acme",
        purpose="support",
    )
    store.close()
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 10)
    real_put = liveness_mod.Liveness._put
    loading = threading.Event()
    go_on = threading.Event()

    def slow_put(self, ids, recs, claims):
        if threading.current_thread().name == "efface-liveness" and len(ids) >= 300:
            loading.set()
            assert go_on.wait(30)  # the load has read its snapshot; commits come meanwhile
        return real_put(self, ids, recs, claims)

    monkeypatch.setattr(liveness_mod.Liveness, "_put", slow_put)
    store = efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock)
    try:
        copy = store._origin.liveness
        assert not copy.usable(None)  # starts the load
        assert loading.wait(30)
        store.forget(tenant="acme", subject="alice")
        store.write_many(
            [{"key": f"b{i}", "text": f"more {i}"} for i in range(20)], tenant="acme", subject="dan", purpose="support"
        )
        store.forget(tenant="acme", key="a1")  # bob's
        go_on.set()
        deadline = time.time() + 30
        while not copy.usable(None) and time.time() < deadline:
            time.sleep(0.01)
        assert copy.usable(None)
        assert disagreements(store, clock.now) == []
        assert vector_disagreements(store) == []
        hits = store.recall("note more", tenant="acme", purpose="support", k=400)
        keys = {h.key for h in hits}
        assert len(keys) == 300 - 100 - 1 + 20
        assert "a0" not in keys and "a1" not in keys and "b3" in keys
    finally:
        store.close()


def test_recall_never_serves_what_only_a_stale_copy_counts_live(tmp_path, monkeypatch):
    """The copy is trusted to choose, not to serve: with it left behind by a forget (its
    update after the commit skipped), recall still returns none of the forgotten records,
    and fills its k with live ones."""
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write_many(
            [
                {"key": f"k{i}", "text": f"invoice {i} for the order", "subject": ("alice", "bob")[i % 2]}
                for i in range(60)
            ],
            tenant="acme",
            purpose="support",
        )
        copy = store._origin.liveness
        monkeypatch.setattr(copy, "committed", lambda noted=(), fresh=None: None)
        store.forget(tenant="acme", subject="alice")
        (tenant,) = store._origin._r().execute("SELECT DISTINCT tenant FROM records").fetchone()
        assert len(copy.live(list(range(1, 61)), tenant, "support", time.time())) == 60  # stale: alice's too
        hits = store.recall("invoice order", tenant="acme", purpose="support", k=10)
        assert len(hits) == 10
        assert all(int(h.key[1:]) % 2 == 1 for h in hits), [h.key for h in hits]
        assert len(store.recall("invoice order", tenant="acme", purpose="support", k=100)) == 30
    finally:
        store.close()


def test_a_rolled_back_write_leaves_the_copy_as_it_was(tmp_path):
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write("k1", "a note", tenant="acme", subject="alice", purpose="support")
        with pytest.raises(efface.EffaceError):
            store.write("k1", "another note", tenant="acme", subject="bob", purpose="support")  # KeyInUse
        assert disagreements(store, time.time()) == []
        o = store._origin
        with o.write_lock:
            assert o.writer.execute("SELECT count(*) FROM temp.efface_touched").fetchone() == (0,)
    finally:
        store.close()


def test_verify_fails_while_memory_still_holds_an_erased_record(tmp_path, monkeypatch):
    """The copy's vectors are content: verify's origin.by_id check asks it about every erased
    id, and fails when one is still counted live or its vector row is not zero."""
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write_many(
            [{"key": f"k{i}", "text": f"note {i}", "subject": ("alice", "bob")[i % 2]} for i in range(10)],
            tenant="acme",
            purpose="support",
        )
        receipt = store.forget(tenant="acme", subject="alice")
        store.compact()
        by_id = next(c for c in store.verify(receipt.handle).checks if c.name == "origin.by_id")
        assert by_id.outcome == "pass" and "in memory" in by_id.detail

        copy = store._origin.liveness
        monkeypatch.setattr(
            copy, "committed", lambda noted=(), fresh=None: None
        )  # the copy left behind by the next forget
        receipt = store.forget(tenant="acme", subject="bob")
        store.compact()
        by_id = next(c for c in store.verify(receipt.handle).checks if c.name == "origin.by_id")
        assert by_id.outcome == "fail" and "in memory: 5" in by_id.detail
    finally:
        store.close()


def test_the_copy_keeps_up_after_the_file_is_rewritten(tmp_path):
    """Rewriting the file (VACUUM) changes the writer's temp_store for a moment, which drops
    its TEMP triggers; they come back, and the erasure after it reaches the copy."""
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write_many(
            [{"key": f"k{i}", "text": f"note {i}"} for i in range(6)], tenant="acme", subject="alice", purpose="support"
        )
        o = store._origin
        o.physical.rewrite()
        store.forget(tenant="acme", key="k2")  # noted by the records trigger only
        assert disagreements(store, time.time()) == []
        assert vector_disagreements(store) == []
        assert "k2" not in {h.key for h in store.recall("note", tenant="acme", purpose="support", k=10)}
    finally:
        store.close()


def test_a_copy_that_cannot_keep_up_goes_and_the_write_stands(tmp_path, monkeypatch):
    """A failure while the copy reads a commit back never fails the write that committed:
    the copy goes, and recalls check in SQLite from then on."""
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write("k1", "a note about tea", tenant="acme", subject="alice", purpose="support")
        copy = store._origin.liveness

        def broken(*_args):
            raise MemoryError

        monkeypatch.setattr(copy, "_put", broken)  # an entry read back
        monkeypatch.setattr(copy, "_put_made", broken)  # a new record's entry
        store.write("k2", "another note about tea", tenant="acme", subject="bob", purpose="support")
        assert not copy.usable(None)
        assert {h.key for h in store.recall("tea", tenant="acme", purpose="support", k=5)} == {"k1", "k2"}
        store.forget(tenant="acme", subject="alice")
        assert {h.key for h in store.recall("tea", tenant="acme", purpose="support", k=5)} == {"k2"}
    finally:
        store.close()


def test_records_made_and_changed_in_one_group_commit_are_read_back(tmp_path):
    """A commit's new records are put in the copy as written, without reading them back,
    unless a later member of the same group commit changed them (a claim added, one
    released, the text replaced, the record deleted); a member rolled back leaves nothing."""
    from efface.origin.base import NewRecord
    from efface.vectors import stored

    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write("seed", "a note", tenant="acme", subject="alice", purpose="support")
        o, tenant = store._origin, store._tenant("acme")
        vecs = stored(store.embedder.embed([f"note {i}" for i in range(6)]))
        recs = [
            NewRecord(f"n{i}", f"note {i}", "{}", (), vecs[i], "alice", "support", "consent", None) for i in range(6)
        ]
        now = time.time()
        with o.group() as member:
            with member("write", tenant, now) as tx:
                rids = tx.upsert_many(tenant, recs[:4], now)
            with member("retain", tenant, now) as tx:
                tx.add_claim(rids[0], "bob", "billing", "consent", None, now)
            with member("release", tenant, now) as tx:
                (claim,) = [c for c in tx.remaining_claims([rids[1]])[rids[1]]]
                tx.release([claim.id])
            with member("replace", tenant, now) as tx:
                tx.replace_text(rids[2], "note two again", vecs[5], now)
            with pytest.raises(RuntimeError), member("write", tenant, now) as tx:
                tx.upsert_many(tenant, recs[4:], now)
                raise RuntimeError("rolled back")
        assert o.liveness.live(rids, tenant, "billing", now) == [rids[0]]
        assert o.liveness.live(rids, tenant, "support", now) == [rids[0], rids[2], rids[3]]
        assert disagreements(store, now) == []
        assert vector_disagreements(store) == []
    finally:
        store.close()


def test_vectors_asked_across_many_blocks_come_back_in_the_order_asked(tmp_path, monkeypatch):
    """The copy keeps vectors in blocks of ids; a recall asks for ids from many blocks at once
    (blocks of 4 ids here instead of 65,536), in any order and with ids it does not hold:
    those it holds come back in the order asked, each with the origin's vector."""
    monkeypatch.setattr(liveness_mod, "BLOCK_BITS", 2)
    monkeypatch.setattr(liveness_mod, "BLOCK", 4)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write_many(
            [{"key": f"k{i}", "text": f"note {i} about topic {i % 7}"} for i in range(40)],
            tenant="acme",
            subject="alice",
            purpose="support",
        )
        store.forget(tenant="acme", key="k7")
        o = store._origin
        stored = dict(o._r().execute("SELECT id, embedding FROM records").fetchall())
        rng = np.random.default_rng(3)
        for n in range(40):
            ask = rng.permutation(np.arange(-2, 50))[: rng.integers(1, 52)]
            if n % 2:
                ask = np.sort(ask)  # as recall asks: in id order
            held, m = o.liveness.vectors(ask)
            assert held.tolist() == [i for i in ask.tolist() if i in stored]
            assert len(o.liveness._blocks) > 5
            for rid, row in zip(held.tolist(), m, strict=True):
                assert np.array_equal(row, read_vector(stored[rid]))
