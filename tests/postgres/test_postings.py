"""The PostgreSQL origin's postings in numpy arrays (origin/postgres/postings.py) against the
memory origin's BM25 over sets and counters (origin/memory/state.py): the same matches, the
same counts and the same scores, to the last bit, through adds, rewrites and removals (the
tail merged into the arrays and not). No server needed."""

from __future__ import annotations

import random
import threading
from collections import Counter

import numpy as np

from efface import compiled
from efface.origin.memory.state import bm25_scores
from efface.origin.postgres import postings as mod
from efface.origin.postgres.postings import Postings

WORDS = [f"w{i}" for i in range(40)]


def _doc(rng: random.Random) -> Counter[str]:
    # a few common words, many rare ones, some repeated
    return Counter(rng.choice(WORDS[: rng.choice((5, 40))]) for _ in range(rng.randint(1, 12)))


class Model:
    """The memory origin's structures, kept beside the postings."""

    def __init__(self) -> None:
        self.docs: dict[int, Counter[str]] = {}
        self.tenant: dict[int, str] = {}
        self.epoch: dict[int, int] = {}

    def postings(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for rid, terms in self.docs.items():
            for t in terms:
                out.setdefault(t, set()).add(rid)
        return out

    def total(self) -> int:
        return sum(sum(c.values()) for c in self.docs.values())


def _same(p: Postings, m: Model, rng: random.Random) -> None:
    post = m.postings()
    assert p.doc_count() == len(m.docs)
    assert {t: p.df(t) for t in WORDS} == {t: len(post.get(t, ())) for t in WORDS}
    for tenant in ("a", "b", "zz"):
        assert p.tenant_count(tenant) == sum(1 for t in m.tenant.values() if t == tenant)
    for _ in range(8):
        finders = rng.sample(WORDS, rng.randint(1, 4))
        scoring = finders + rng.sample(WORDS, rng.randint(0, 4))
        tenant = rng.choice((None, "a", "b"))
        pinned = rng.choice((None, 0, 3, 10**6))
        want = set().union(*(post.get(t, set()) for t in finders))
        if tenant is not None:
            want = {r for r in want if m.tenant[r] == tenant}
        if pinned is not None:
            want = {r for r in want if m.epoch[r] <= pinned}
        got = p.matches(finders, tenant, pinned)
        assert got.tolist() == sorted(want)
        expect = bm25_scores(want, m.docs, post, m.total(), scoring)
        scores = p.scores(got, scoring)
        assert dict(zip(got.tolist(), scores.tolist(), strict=True)) == expect  # bit for bit
        ids, together = p.ranking(finders, scoring, tenant, pinned)  # in one walk where compiled
        assert ids.tolist() == got.tolist() and together.tolist() == scores.tolist()
        every = set(post.get(finders[0], set())).intersection(*(post.get(t, set()) for t in finders[1:]))
        assert p.holding_all(finders).tolist() == sorted(every)


def test_postings_score_as_the_memory_origins_bm25(monkeypatch, scan_kernel):
    """In numpy and in the compiled walk (efface.compiled) alike."""
    monkeypatch.setattr(mod, "TAIL", 7)  # small, so tails are merged into arrays along the way
    rng = random.Random(5)
    m = Model()
    first = [(rid, rng.choice("ab"), _doc(rng)) for rid in range(1, 60)]
    p = Postings.build(first)
    for rid, tenant, terms in first:
        m.docs[rid], m.tenant[rid], m.epoch[rid] = terms, tenant, 0
    _same(p, m, rng)
    for epoch in range(1, 40):
        gone = rng.sample(sorted(m.docs), min(len(m.docs), rng.randint(0, 5)))
        new = [(rng.randint(1, 140), rng.choice("ab"), _doc(rng)) for _ in range(rng.randint(0, 6))]
        new = list({rid: (rid, t, d) for rid, t, d in new}.values())
        p.remove([*gone, *(rid for rid, _t, _d in new)])  # a rewrite leaves, then comes back
        for rid in [*gone, *(rid for rid, _t, _d in new)]:
            m.docs.pop(rid, None)
            m.tenant.pop(rid, None)
            m.epoch.pop(rid, None)
        for rid, tenant, terms in new:
            p.add(rid, tenant, terms, epoch)
            m.docs[rid], m.tenant[rid], m.epoch[rid] = terms, tenant, epoch
        _same(p, m, rng)
    assert all(not p.holds(rid) for rid in range(141) if rid not in m.docs)
    p.remove(list(m.docs))
    assert p.doc_count() == 0 and not p.terms and p.len_total == 0
    assert not np.any(p.length) and p.matches(WORDS).tolist() == []


def test_a_tenant_leaves_with_its_last_record():
    p = Postings()
    p.add(1, "t1", Counter({"a": 1}))
    p.add(2, "t2", Counter({"a": 2}))
    p.remove([1])
    assert p.tenant_count("t1") == 0 and "t1" not in p._codes
    p.add(3, "t3", Counter({"a": 1}))  # a new tenant never takes another's code
    assert p.matches(["a"], "t2").tolist() == [2] and p.matches(["a"], "t3").tolist() == [3]


def test_a_large_index_has_the_loops_compiled_and_scores_the_same(monkeypatch):
    """Past COMPILE_RECORDS records a query starts the compile (on a thread, never waited
    for); until it is ready numpy scores, then the compiled walk, to the same bits."""
    compiled.reset()
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    monkeypatch.setattr(mod, "COMPILE_RECORDS", 50)
    started: list[bool] = []
    monkeypatch.setattr(compiled, "warm_now", lambda: started.append(True))
    rng = random.Random(11)
    p = Postings.build((rid, "a", _doc(rng)) for rid in range(1, 40))
    terms = WORDS[:6]
    p.scores(p.matches(terms), terms)
    assert not started  # 39 records: numpy's scoring, no compile
    for rid in range(40, 120):
        p.add(rid, "a", _doc(rng))
    found = p.matches(terms)
    by_numpy = p.scores(found, terms)
    assert started and not compiled.ready()
    try:
        assert compiled.on(), "numba should load and compile"
        assert np.array_equal(p.scores(found, terms), by_numpy)
    finally:
        compiled.reset()


def test_asking_for_the_compile_while_it_runs_never_waits_for_it(monkeypatch):
    """The compile holds ``compiled._lock`` for its whole run (a second or more): a recall
    that asks for it meanwhile (``warm_now``, past COMPILE_RECORDS) must return at once, not
    queue behind it on that lock while it holds the word index's own lock."""
    compiled.reset()
    monkeypatch.setattr(compiled, "_warming", True)  # a compile started and is running
    returned = threading.Event()
    with compiled._lock:  # held as the compile holds it

        def ask() -> None:
            compiled.warm_now()
            returned.set()

        t = threading.Thread(target=ask, daemon=True)
        t.start()
        t.join(timeout=30)  # a deadlock guard, not a timing: with the lock taken it never returns
        assert returned.is_set(), "warm_now waited for the running compile's lock"
    compiled.reset()
