#!/usr/bin/env python
"""Fusion rules compared offline on what efface's fusion is given (capture_fusion.py): each
leg alone, the shipped rule (reproduced, and checked against what recall returned) and rules
that weigh each leg by what its own scores say of its confidence for the query (issue #36
item 2; not a benchmark of record).

    python bench/experiments/exp_fusion_confidence.py /tmp/fusion/*.pkl
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable

import numpy as np

from efface.paths.recall import _keeping

SPREAD = 3.0
K = 10


keeping = _keeping
"""Recall's own rule for the top k (each leg's best kept in), so the replay is the shipped one."""


def scaled(vector_leg: bool, v: np.ndarray, ceiling) -> np.ndarray:
    if vector_leg:
        mu, sd = float(v.mean()), float(v.std())
        if sd == 0.0:
            return np.full(len(v), 0.5)
        return np.maximum(0.0, (v - mu) / (2 * SPREAD * sd) + 0.5)
    return v / ceiling


def parts(qd):
    """(union, cosine over the union, text leg's raw and its ceiling, aligned to the union)."""
    vec = [x for x in qd["legs"] if x[0]]
    txt = [x for x in qd["legs"] if not x[0]]
    if vec:
        union, cos = vec[0][1], vec[0][2]
    else:
        union, cos = np.array([], dtype=np.int64), np.array([])
    bm = np.zeros(len(union))
    ceiling = None
    if txt:
        _, ids, raw, ceiling = txt[0]
        pos = {d: i for i, d in enumerate(union.tolist())}
        for d, x in zip(ids.tolist(), raw.tolist(), strict=True):
            if d in pos:
                bm[pos[d]] = x
    return union, cos, bm, ceiling


def ranked(union, total, tie=None):
    tie = np.zeros(len(union)) if tie is None else tie
    return union[np.lexsort((union, -tie, -total))].tolist()


def leg_best(union, raw, matched=None):
    m = np.ones(len(union), dtype=bool) if matched is None else matched
    if not m.any():
        return set()
    idx = np.flatnonzero(m)
    order = idx[np.lexsort((union[idx], -raw[idx]))]
    return {int(union[order[0]])}


# -- rules --------------------------------------------------------------------------------
def r_text(qd, lexical):
    union, cos, bm, _ = parts(qd)
    m = bm > 0
    return ranked(union[m], bm[m], cos[m])


def r_vec(qd, lexical):
    union, cos, _, _ = parts(qd)
    return ranked(union, cos)


def r_shipped(qd, lexical):
    union, cos, bm, ceiling = parts(qd)
    t = scaled(False, bm, ceiling) if ceiling else bm
    v = scaled(True, cos, None)
    if lexical:
        return keeping(ranked(union, t, v), leg_best(union, bm, bm > 0), K)
    best = leg_best(union, bm, bm > 0) | leg_best(union, cos)
    return keeping(ranked(union, t + v), best, K)


def conf_text(bm: np.ndarray, k: int = K) -> float:
    """How far the text leg's best stands above its k-th (a share of the best)."""
    s = np.sort(bm[bm > 0])[::-1]
    if len(s) == 0:
        return 0.0
    kth = s[min(k, len(s)) - 1] if len(s) >= k else 0.0
    return float((s[0] - kth) / s[0])


def conf_vec(cos: np.ndarray, k: int = K) -> float:
    s = np.sort(cos)[::-1]
    if len(s) < 2:
        return 0.0
    sd = float(cos.std()) or 1.0
    return float((s[0] - s[min(k, len(s)) - 1]) / sd)


def gaps_scaled(t: np.ndarray, v: np.ndarray, bm: np.ndarray, how: str, k: int = K) -> tuple[float, float]:
    """Each leg's gap between its best and its k-th candidate, as ``how`` measures it."""

    def gap(x, rel):
        s = np.sort(x)[::-1]
        if len(s) == 0 or s[0] <= 0:
            return 0.0
        kth = s[k - 1] if len(s) >= k else 0.0
        return float((s[0] - kth) / s[0]) if rel else float(s[0] - kth)

    if how == "fused":
        return gap(t[bm > 0], False), gap(v, False)
    if how == "relative":
        return gap(t[bm > 0], True), gap(v, True)
    raise ValueError(how)


def r_gap(how: str, power: float = 1.0, keep: str = "both"):
    def f(qd, lexical):
        if lexical:
            return r_shipped(qd, lexical)
        union, cos, bm, ceiling = parts(qd)
        t = scaled(False, bm, ceiling) if ceiling else bm
        v = scaled(True, cos, None)
        if how == "rel/dbsf":
            gt, gv = conf_text(bm), min(1.0, conf_vec(cos) / (2 * SPREAD))
        else:
            gt, gv = gaps_scaled(t, v, bm, how)
        gt, gv = gt**power, gv**power
        if gt + gv == 0:
            wt = wv = 0.5
        else:
            wt, wv = gt / (gt + gv), gv / (gt + gv)
        bt, bv = leg_best(union, bm, bm > 0), leg_best(union, cos)
        best = bt | bv if keep == "both" else (bt if wt >= wv else bv)
        return keeping(ranked(union, 2 * (wt * t + wv * v)), best, K)

    return f


RULES: dict[str, Callable] = {
    "text leg": r_text,
    "vector leg": r_vec,
    "shipped": r_shipped,
}
for how in ("rel/dbsf", "fused", "relative"):
    for power in (1.0, 2.0):
        RULES[f"gap {how} ^{power:g}"] = r_gap(how, power)
        RULES[f"gap {how} ^{power:g} keep1"] = r_gap(how, power, "confident")


def metrics(lists, rel, mask=None):
    per = []
    for got, r in zip(lists, rel, strict=True):
        per.append(
            (
                len(r & set(got[:5])) / min(len(r), 5),
                len(r & set(got[:10])) / min(len(r), 10),
                next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in r), 0.0),
            )
        )
    a = np.array(per)
    if mask is not None:
        a = a[mask]
    return tuple(round(float(x), 3) for x in a.mean(axis=0))


def main() -> None:
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            d = pickle.load(f)
        rel, lex = d["relevant"], d["lexical"]
        print(f"\n{d['set']} / {d['embedder']}: {len(rel)} queries (r@5, r@10, mrr@10)")
        got = [qd["got"] for qd in d["q"]]
        print(f"  {'efface as run':24s} {metrics(got, rel)}")
        for name, rule in RULES.items():
            lists = [rule(qd, lex) for qd in d["q"]]
            if name == "shipped":
                same = sum(a[:10] == b[:10] for a, b in zip(lists, got, strict=True))
                print(f"  (shipped reproduced on {same}/{len(got)} queries)")
            print(f"  {name:24s} {metrics(lists, rel)}")


def r_ztop(c: float, keep: str = "both"):
    """The vector leg votes in proportion to how far its best cosine stands above the union's
    mean, full from ``c`` standard deviations; the text leg always fully."""

    def f(qd, lexical):
        if lexical:
            return r_shipped(qd, lexical)
        union, cos, bm, ceiling = parts(qd)
        t = scaled(False, bm, ceiling) if ceiling else bm
        v = scaled(True, cos, None)
        sd = float(cos.std()) or 1.0
        wv = min(1.0, max(0.0, (float(cos.max()) - float(cos.mean())) / sd / c))
        bt, bv = leg_best(union, bm, bm > 0), leg_best(union, cos)
        best = bt | bv if keep == "both" or wv >= 1.0 else bt
        return keeping(ranked(union, t + wv * v), best, K)

    return f


for c in (2.0, 2.5, 3.0):
    RULES[f"ztop/{c:g}"] = r_ztop(c)
    RULES[f"ztop/{c:g} keep"] = r_ztop(c, "confident")


def r_textnorm(how: str):
    """The text leg's BM25 put on another scale: a share of its own best (``top``), or of the
    geometric mean of its best and the query's ceiling (``geo``); the vector leg as shipped."""

    def f(qd, lexical):
        if lexical:
            return r_shipped(qd, lexical)
        union, cos, bm, ceiling = parts(qd)
        top = float(bm.max()) if len(bm) else 0.0
        if top <= 0:
            return r_shipped(qd, lexical)
        den = {"top": top, "geo": (top * ceiling) ** 0.5, "ceiling": ceiling}[how]
        t = bm / den
        v = scaled(True, cos, None)
        best = leg_best(union, bm, bm > 0) | leg_best(union, cos)
        return keeping(ranked(union, t + v), best, K)

    return f


for how in ("top", "geo"):
    RULES[f"text/{how}"] = r_textnorm(how)


def r_gated(power: float, zfull: float = SPREAD, keep: str = "both"):
    """Weights by the legs' relative gaps (as ``gap relative``), except when the vector leg's
    best stands ``zfull`` standard deviations or more above the union's mean: then both
    fully, as shipped."""

    def f(qd, lexical):
        if lexical:
            return r_shipped(qd, lexical)
        _, cos, _, _ = parts(qd)
        sd = float(cos.std()) or 1.0
        if (float(cos.max()) - float(cos.mean())) / sd >= zfull:
            return r_shipped(qd, lexical)
        return r_gap("relative", power, keep)(qd, lexical)

    return f


for pw in (1.0, 2.0):
    for z in (2.5, 3.0):
        RULES[f"gated ^{pw:g} z{z:g}"] = r_gated(pw, z)
        RULES[f"gated ^{pw:g} z{z:g} keep1"] = r_gated(pw, z, "confident")


if __name__ == "__main__":
    main()
