#!/usr/bin/env python
"""What each leg's own scores say about its confidence per query, and fusion rules built on
it, replayed offline on what recall's fusion is given (capture_fusion.py) on all three sets
(issue #36 item 2, session 26; not a benchmark of record).

    PYTHONPATH=src python bench/experiments/capture_fusion.py conversations-all minilm conv.pkl
    PYTHONPATH=src python bench/experiments/capture_fusion.py manpages minilm man.pkl 2000 982
    PYTHONPATH=src python bench/experiments/capture_fusion.py debian minilm deb.pkl 5000 500
    PYTHONPATH=src python bench/experiments/exp_fusion_calibration.py conv.pkl man.pkl deb.pkl

Part 1, calibration: the share of queries whose leg's first record is relevant, by bins of a
statistic of that leg's scores. A statistic that says the same thing on every set (the same
share in the same bin) is a confidence a fusion rule could use without being fitted to one
set. Statistics: the vector leg's best cosine in standard deviations above the tenant sample
(``vz``, what recall's vote is judged by), its gap to the second in the sample's sd
(``vgap1``); the text leg's share of its ceiling (``tshare``) and its relative gap to the
second (``tgap1``); for both, the top-spacing statistic ``T``: the first spacing over the mean
of the next normalised spacings ``i * (s[i-1] - s[i])`` of the leg's top 11 scores, which under
an exponential tail (no record standing out) is about 1 whatever the scale (Rényi's
representation of order statistics), so it reads alike for BM25 and cosines.

Part 2, rules: recall@1 / recall@5 / recall@10 / MRR@10 on each set, the shipped rule
reproduced first (``paths/scores.py``: standard-score cosine times the vote plus the BM25
share, each voting leg's best kept).
"""

from __future__ import annotations

import itertools
import pickle
import sys
from collections.abc import Callable

import numpy as np

from efface.paths.recall import _keeping
from efface.paths.scores import _scaled, _standing

K = 10


def parts(qd):
    """(union, cosine over the union, the text leg's BM25 on the union (0: not found), ceiling)."""
    vec = [x for x in qd["legs"] if x[0]]
    txt = [x for x in qd["legs"] if not x[0]]
    union, cos = (vec[0][1], vec[0][2]) if vec else (np.array([], dtype=np.int64), np.array([]))
    bm = np.zeros(len(union))
    ceiling = None
    if txt:
        _, ids, raw, ceiling = txt[0]
        pos = {d: i for i, d in enumerate(union.tolist())}
        for d, x in zip(ids.tolist(), raw.tolist(), strict=True):
            bm[pos[d]] = x
    return union, cos, bm, ceiling


def ranked(union, total, tie=None):
    tie = np.zeros(len(union)) if tie is None else tie
    return union[np.lexsort((union, -tie, -total))].tolist()


def top(union, raw, n=1, m=None):
    m = np.ones(len(union), dtype=bool) if m is None else m
    idx = np.flatnonzero(m)
    return set(union[idx[np.lexsort((union[idx], -raw[idx]))][:n]].tolist())


def dbsf(cos):
    return _scaled(True, None, cos, None)


def spacing_t(scores, m=10) -> float:
    """The top-spacing statistic (module docstring); 0 when the runners-up all tie."""
    s = np.sort(np.asarray(scores))[::-1][: m + 1]
    if len(s) < m + 1:
        return 0.0
    norm = np.arange(1, m + 1) * (s[:-1] - s[1:])
    beta = norm[1:].mean()
    return float(norm[0] / beta) if beta > 1e-12 else 0.0


def vote(qd, cos, union):
    return _standing(union, cos, [], qd.get("background"))


def fused(qd, text_scale=None, vec_scale=None, weight=None, keep=(1, 1)) -> list[int]:
    """The shipped rule, with one of its parts replaced."""
    union, cos, bm, ceiling = parts(qd)
    w = vote(qd, cos, union)
    if weight is not None and w > 0:
        w = weight(qd, union, cos, bm, ceiling, w)
    t = text_scale(union, cos, bm, ceiling) if text_scale else bm / ceiling
    v = vec_scale(qd, cos) if vec_scale else dbsf(cos)
    kept = top(union, bm, keep[0], bm > 0) | (top(union, cos, keep[1]) if w >= 1.0 else set())
    return _keeping(ranked(union, t + w * v), kept, K)


def shipped(qd):
    return fused(qd)


def text_leg(qd):
    union, cos, bm, _ = parts(qd)
    m = bm > 0
    return ranked(union[m], bm[m], cos[m])


def vector_leg(qd):
    union, cos, _, _ = parts(qd)
    return ranked(union, cos)


def first_by_confidence(qd) -> list[int]:
    """Shipped, but when the legs' firsts differ and the fused first is one of them, the leg
    with the larger top-spacing statistic puts its own first on top."""
    out = shipped(qd)
    union, cos, bm, _ = parts(qd)
    if vote(qd, cos, union) <= 0:
        return out
    tb, vb = next(iter(top(union, bm, 1, bm > 0))), next(iter(top(union, cos)))
    tt, tv = spacing_t(bm[bm > 0]), spacing_t(cos)
    first = tb if (out[0] == vb and tt > tv) else vb if (out[0] == tb and tv > tt) else None
    return out if first is None else [first] + [x for x in out if x != first][: K - 1]


def decisive_text(tau: float) -> Callable:
    """Shipped, but a text leg whose best is a clear outlier (T >= tau: e^-tau by chance) puts it first."""

    def rule(qd):
        out = shipped(qd)
        union, cos, bm, _ = parts(qd)
        if vote(qd, cos, union) <= 0 or spacing_t(bm[bm > 0]) < tau:
            return out
        tb = next(iter(top(union, bm, 1, bm > 0)))
        return out if out[0] == tb else [tb] + [x for x in out if x != tb][: K - 1]

    return rule


def spacing_units(qd, cap=10.0) -> list[int]:
    """Each leg's scores minus its best, in its own top-spacing scale (a product of experts
    under the exponential tail), floored at -cap; the vote and the kept bests as shipped."""

    def beta(s):
        s = np.sort(s)[::-1][:11]
        b = (np.arange(1, len(s)) * (s[:-1] - s[1:]))[1:].mean() if len(s) > 2 else 0.0
        return b if b > 1e-12 else None

    _union, cos, bm, _ceiling = parts(qd)
    found = bm > 0
    bt, bv = beta(bm[found]), beta(cos)
    if bt is None or bv is None:
        return shipped(qd)
    floor = bm[found].min() if found.any() else 0.0
    return fused(
        qd,
        text_scale=lambda u, c, b, ce: np.maximum(-cap, (np.where(found, b, floor) - b.max()) / bt),
        vec_scale=lambda q, c: np.maximum(-cap, (c - c.max()) / bv),
    )


def coordinated_rule(exponent: float, wide: int = 2 * K) -> Callable:
    """Shipped, then the first ``wide`` re-scored: the text share times the coordination (the
    share of the question's content words a record holds) to ``exponent``, where the vector
    leg is a meaning leg (recall as of session 26 with 0.5: ``paths/scores.py``'s ``coordinated``)."""
    from efface.text import content_words, query_words, words

    def rule(qd):
        union, cos, bm, ceiling = parts(qd)
        w = vote(qd, cos, union)
        t, bests = bm / ceiling, top(union, bm, 1, bm > 0) | (top(union, cos) if w >= 1.0 else set())
        total = t + w * dbsf(cos)
        first = _keeping(ranked(union, total), bests, wide)
        at = np.searchsorted(union, np.asarray(first, dtype=np.int64))
        wanted = set(content_words(query_words(qd["question"])))
        held = np.array([len(wanted & set(words(qd["texts"][x]))) / max(1, len(wanted)) for x in first])
        rescored = total[at] - t[at] + t[at] * held**exponent
        return _keeping([first[i] for i in np.lexsort((union[at], -rescored))], bests & set(first), K)

    return rule


RULES: dict[str, Callable] = {
    "text leg": text_leg,
    "vector leg": vector_leg,
    "session 25 (band 3-3.5)": shipped,
    # the vector's differences in the tenant sample's sd, not the union's
    "cosine in the sample's sd": lambda qd: fused(
        qd, vec_scale=lambda q, c: np.maximum(0.0, (c - c.mean()) / (6 * q["background"].std()) + 0.5)
    ),
    # the vote also scaled by the vector's best-to-second gap (full from 1 sample sd)
    "vote x gap to 2nd (1 sd)": lambda qd: fused(
        qd,
        weight=lambda q, u, c, b, ce, w: w * min(1.0, float(np.diff(np.sort(c)[-2:])[0]) / q["background"].std()),
    ),
    # the vote scaled by the legs' top-spacing confidences, 1 - e^-T, the vector's over the text's
    "vote x vector/text confidence": lambda qd: fused(
        qd,
        weight=lambda q, u, c, b, ce, w: (
            w * min(1.0, (1 - np.exp(-spacing_t(c))) / max(1e-9, 1 - np.exp(-spacing_t(b[b > 0]))))
        ),
    ),
    "first by top-spacing T": first_by_confidence,
    "text first when T >= 4": decisive_text(4.0),
    "text first when T >= 6": decisive_text(6.0),
    "text as share of its own best": lambda qd: fused(qd, text_scale=lambda u, c, b, ce: b / max(b.max(), 1e-12)),
    "text x 1.5": lambda qd: fused(qd, text_scale=lambda u, c, b, ce: 1.5 * b / ce),
    "keep 3 of each leg": lambda qd: fused(qd, keep=(3, 3)),
    "each leg in its top-spacing units": spacing_units,
    "coordination, root, first 2k (now)": coordinated_rule(0.5),
    "coordination, whole, first 2k": coordinated_rule(1.0),
    "coordination, root, first k": coordinated_rule(0.5, K),
    "coordination, root, first 5k": coordinated_rule(0.5, 5 * K),
}


def metrics(lists, rel):
    per = []
    for got, r in zip(lists, rel, strict=True):
        per.append(
            [len(r & set(got[:c])) / min(len(r), c) for c in (1, 5, 10)]
            + [next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in r), 0.0)]
        )
    return np.array(per).mean(axis=0)


def calibration(name, d) -> None:
    stats: dict[str, tuple[list, list]] = {}
    bins = {
        "vz": [3, 3.5, 4, 5, 6, 99],
        "vgap1": [0, 0.1, 0.25, 0.5, 1, 99],
        "vT": [0, 1, 2, 4, 8, 1e9],
        "tshare": [0, 0.3, 0.4, 0.5, 0.7, 1.01],
        "tgap1": [0, 0.02, 0.05, 0.1, 0.2, 1.01],
        "tT": [0, 1, 2, 4, 8, 1e9],
    }
    for qd, r in zip(d["q"], d["rel"], strict=True):
        _union, cos, bm, ceiling = parts(qd)
        bg = qd["background"]
        bs = np.sort(bm[bm > 0])[::-1]
        if len(bs) < 11 or bg is None:
            continue
        cs = np.sort(cos)[::-1]
        v_ok, t_ok = vector_leg(qd)[0] in r, text_leg(qd)[0] in r
        for key, x, ok in (
            ("vz", (cs[0] - bg.mean()) / bg.std(), v_ok),
            ("vgap1", (cs[0] - cs[1]) / bg.std(), v_ok),
            ("vT", spacing_t(cos), v_ok),
            ("tshare", bs[0] / ceiling, t_ok),
            ("tgap1", (bs[0] - bs[1]) / bs[0], t_ok),
            ("tT", spacing_t(bs), t_ok),
        ):
            stats.setdefault(key, ([], []))
            stats[key][0].append(x)
            stats[key][1].append(ok)
    print(f"{name}: share of queries whose leg's first is relevant, by bin (queries/share)")
    for key, b in bins.items():
        x, y = np.array(stats[key][0]), np.array(stats[key][1], dtype=float)
        cells = []
        for lo, hi in itertools.pairwise(b):
            m = (x >= lo) & (x < hi)
            cells.append(f"[{lo:g},{hi:g}) {m.sum()}/{y[m].mean():.2f}" if m.sum() else f"[{lo:g},{hi:g}) 0")
        print(f"  {key:7s} " + "  ".join(cells))


def main() -> None:
    sets = []
    for p in sys.argv[1:]:
        with open(p, "rb") as f:
            d = pickle.load(f)
        d["rel"] = [set(r) for r in d["relevant"]]
        for i, qd in enumerate(d["q"]):
            qd["texts"], qd["question"] = d.get("texts"), (d.get("questions") or [""] * len(d["q"]))[i]
        same = sum(shipped(qd)[:10] == qd["got"][:10] for qd in d["q"])
        now = sum(coordinated_rule(0.5)(qd)[:10] == qd["got"][:10] for qd in d["q"]) if d.get("texts") else "-"
        print(
            f"{p}: {d['set']} {d['embedder']} {len(d['q'])} q; the same top 10 as recall returned:"
            f" session 25's rule {same}, coordinated {now}"
        )
        sets.append(d)
    for d in sets:
        calibration(d["set"], d)
    print("\nrecall@1 recall@5 recall@10 MRR@10")
    print(f"{'rule':34s}" + "".join(f"{d['set'][:14]:>27s}" for d in sets))
    for name, rule in RULES.items():
        if name.startswith("coordination") and not all(d.get("texts") for d in sets):
            continue
        row = [" ".join(f"{x:.3f}" for x in metrics([rule(qd) for qd in d["q"]], d["rel"])) for d in sets]
        print(f"{name:34s}" + "".join(f"{r:>27s}" for r in row))


if __name__ == "__main__":
    main()
