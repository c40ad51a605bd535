"""Recall's answer does not depend on whether the SQLite origin's copy of liveness has loaded
(origin/sqlite/liveness.py: a large store loads it in the background from its first recall).
Recall judges its vector leg's vote against a random sample of the tenant's live vectors
(:func:`efface.paths.scores._background`); the copy drew it, and while it loaded there was none,
so a store reopened answered a sixth of the all-of-Debian queries differently in its first
seconds than after (bench/experiments/same_store_forced.py). While it loads, the origin draws the
same sample from the file. Both states are forced here, never timed: a store small enough to
load the copy as it opens, then reopened with ``LOAD_HERE`` below its size and nothing asking
for the copy (so it never starts loading)."""

from __future__ import annotations

import numpy as np
import pytest

import efface
from efface.origin.sqlite import liveness as liveness_mod
from efface.paths.scores import SAMPLE
from test_embed import minilm  # noqa: F401  (the MiniLM fixture: loaded offline, skipped or failed as there)

from conftest import FakeClock

pytestmark = pytest.mark.sqlite_only("the SQLite origin's copy of liveness")

T, P = "acme", "support"
TOPICS = ["weather", "invoices", "printer", "holidays", "database", "coffee", "garden", "train", "music", "taxes"]


def _fill(path, clock, embedder="hashing") -> None:
    """More records than the sample holds, and every kind the copy must count as SQLite does:
    a claim that expires (and has expired by the draw, not swept), records of another purpose
    only, a quarantined record (its source forgotten), another tenant's records."""
    with efface.open(path, embedder=embedder, background=False, clock=clock) as s:
        items = [
            {"key": f"k{i}", "text": f"note {i} about the {TOPICS[i % 10]} and {TOPICS[(i * 7) % 10]}"}
            for i in range(400)
        ]
        s.write_many(items[:150], tenant=T, subject="alice", purpose=P)
        s.write_many(items[150:300], tenant=T, subject="frank", purpose=P)
        s.write_many(items[300:340], tenant=T, subject="bob", purpose=P, ttl=30)
        s.write_many(items[340:380], tenant=T, subject="carol", purpose="billing")
        s.write_many(
            [
                {"key": "src", "text": "the source of a derived note"},
                {"key": "der", "text": "derived", "sources": ["src"]},
            ],
            tenant=T,
            subject="dan",
            purpose=P,
        )
        s.forget(tenant=T, key="src")  # "der" is quarantined
        s.write_many(items[380:], tenant="globex", subject="erin", purpose=P)
    clock.advance(45)  # bob's claims have expired


def _samples(store, now: float) -> list[np.ndarray]:
    o = store._origin
    return [o.vector_sample(store._tenant(T), p, now, n) for p, n in ((P, SAMPLE), (P, 50), ("billing", SAMPLE))]


def test_the_sample_is_the_same_drawn_from_the_file_while_the_copy_loads(tmp_path, monkeypatch):
    clock = FakeClock()
    _fill(tmp_path / "s", clock)
    with efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock) as s:
        assert s._origin.liveness.loaded  # small: loaded as it opens
        loaded = _samples(s, clock.now)
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 10)
    with efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock) as s:
        assert not s._origin.liveness.loaded  # a large store's, before its first recall asks for it
        here = _samples(s, clock.now)
        assert not s._origin.liveness.loaded  # the sample did not start the load
    # drawn from the tenant's 381 records with a claim, then those live for the purpose kept
    assert all(0 < len(a) < n for a, n in zip(loaded, (SAMPLE, 50, SAMPLE), strict=True))
    for a, b in zip(loaded, here, strict=True):
        assert a.dtype == b.dtype == np.float32
        assert np.array_equal(a, b)


def test_a_commit_while_the_copy_loads_draws_again_and_keeps_no_erased_vector(tmp_path, monkeypatch):
    clock = FakeClock()
    _fill(tmp_path / "s", clock)
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 10)
    with efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock) as s:
        o, tid = s._origin, s._tenant(T)
        before = o.vector_sample(tid, P, clock.now, SAMPLE)
        assert np.array_equal(before, o.vector_sample(tid, P, clock.now, SAMPLE))  # kept
        marks = ",".join("?" * 150)
        alice = o._r().execute(f"SELECT embedding FROM records WHERE key IN ({marks})", [f"k{i}" for i in range(150)])
        erased = {bytes(b) for (b,) in alice}
        assert len(erased) == 150
        s.forget(tenant=T, subject="alice")
        assert [v for _w, v in o.liveness._samples.values()] == []  # the draw holding alice's went with the commit
        after = o.vector_sample(tid, P, clock.now, SAMPLE)
        assert after.shape[0] == 150  # frank's: every other record of the tenant is not live for P
        assert not {b"\x10" + row.astype("<f2").tobytes() for row in after} & erased
        assert not np.array_equal(after[:150], before[:150])
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 20_000)
    with efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock) as s:
        assert np.array_equal(s._origin.vector_sample(s._tenant(T), P, clock.now, SAMPLE), after)


def test_recall_answers_alike_before_and_after_the_copy_loads(tmp_path, monkeypatch, minilm):  # noqa: F811
    """A meaning leg beside the words (MiniLM), whose vote the sample weighs."""
    clock = FakeClock()
    _fill(tmp_path / "s", clock, embedder=minilm)
    questions = [f"what about the {a} and the {b}?" for a in TOPICS[:5] for b in TOPICS[5:]] + ["note 17", "coffee"]

    def answers():
        with efface.open(tmp_path / "s", embedder=minilm, background=False, clock=clock) as s:
            loaded = s._origin.liveness.loaded
            if not loaded:
                s._origin.liveness._later = False  # never loads: every recall checks in SQLite
            got = [[h.key for h in s.recall(q, tenant=T, purpose=P, k=10)] for q in questions]
            assert s._origin.liveness.loaded == loaded
            return got

    loaded = answers()
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 10)
    assert answers() == loaded


def test_a_draw_a_commit_overtook_serves_its_recall_and_is_not_kept(tmp_path, monkeypatch):
    """A forget that commits while a sample is drawn (from the file here) may have erased one
    of its records: the draw is used once, never kept for the next recall."""
    clock = FakeClock()
    _fill(tmp_path / "s", clock)
    monkeypatch.setattr(liveness_mod, "LOAD_HERE", 10)
    with efface.open(tmp_path / "s", embedder="hashing", background=False, clock=clock) as s:
        o, tid = s._origin, s._tenant(T)
        draw = o._sample_here

        def overtaken(*args):
            got = draw(*args)
            s.forget(tenant=T, subject="alice")  # commits after the draw read its records
            return got

        monkeypatch.setattr(o, "_sample_here", overtaken)
        first = o.vector_sample(tid, P, clock.now, SAMPLE)
        assert len(first) and o.liveness._samples == {}
        monkeypatch.setattr(o, "_sample_here", draw)
        again = o.vector_sample(tid, P, clock.now, SAMPLE)
        assert len(again) == 150 and [v for _w, v in o.liveness._samples.values()] == [again]  # frank's, kept
