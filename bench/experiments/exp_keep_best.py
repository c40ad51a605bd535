#!/usr/bin/env python
"""Where recall's ``KEEP_BEST`` puts a leg's first record, and rules that put it higher or
weigh the text leg more, replayed offline with MiniLM on what the fusion is given
(``capture_fusion.py``'s records; issue #36, session 28; not a benchmark of record).

    PYTHONPATH=src python bench/experiments/capture_fusion.py debian minilm deb5k.pkl 5000 500
    PYTHONPATH=src python bench/experiments/exp_keep_best.py conv.pkl man.pkl deb.pkl deb5k.pkl

Part 1: per set, the queries whose full-text leg's first record recall returns 8th to 10th
(kept there by ``KEEP_BEST``: it takes the lowest place of the top ``k`` and keeps its fused
order), and how many of those firsts are an answer. Part 2: recall@5 / recall@10 / MRR@10 of
the shipped rule (reproduced: its top 10 equal recall's on every query) and of variants: the
kept firsts within the first 5 or 3 places, the text leg's first within the first 5, the
final ``k`` in reciprocal-rank order (as LanceDB's hybrid ranks), and the text share scaled
(by its own best instead of the ceiling, by 1.25 or 1.5, its square root).
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import exp_fusion_calibration as C

from efface.paths.recall import _keeping
from efface.text import content_words, query_words, words

K = 10


def order(qd, text_scale: Callable | None = None):
    """The shipped fusion up to the kept bests: the first 2k, coordinated, in their new order;
    the bests kept; the text leg's and the vector leg's; the union, cosines and BM25."""
    union, cos, bm, ceiling = C.parts(qd)
    w = C.vote(qd, cos, union)
    t = text_scale(bm, ceiling) if text_scale else bm / ceiling
    tb = C.top(union, bm, 1, bm > 0)
    vb = C.top(union, cos) if w >= 1.0 else set()
    total = t + w * C.dbsf(cos)
    first = _keeping(C.ranked(union, total), tb | vb, 2 * K)
    at = np.searchsorted(union, np.asarray(first, dtype=np.int64))
    wanted = set(content_words(query_words(qd["question"])))
    held = np.array([len(wanted & set(words(qd["texts"][x]))) / max(1, len(wanted)) for x in first])
    rescored = total[at] - t[at] + t[at] * np.sqrt(held)
    got = [first[i] for i in np.lexsort((union[at], -rescored))]
    return got, (tb | vb) & set(first), tb & set(first), vb & set(first), union, cos, bm


def shipped(qd):
    got, kept, *_ = order(qd)
    return _keeping(got, kept, K)


def kept_within(depth: int, text_only: bool = False) -> Callable:
    def rule(qd):
        got, kept, tb, vb, *_ = order(qd)
        top = _keeping(got, tb if text_only else kept, depth)
        return _keeping(top + [x for x in got if x not in top], vb if text_only else set(), K)

    return rule


def reciprocal_order(qd):
    got, kept, _tb, _vb, union, cos, bm = order(qd)
    final = _keeping(got, kept, K)
    vr = {x: r for r, x in enumerate(union[np.lexsort((union, -cos))].tolist())}
    idx = np.flatnonzero(bm > 0)
    tr = {x: r for r, x in enumerate(union[idx[np.lexsort((union[idx], -bm[idx]))]].tolist())}
    s = {x: 1 / (61 + vr[x]) + (1 / (61 + tr[x]) if x in tr else 0) for x in final}
    return sorted(final, key=lambda x: (-s[x], final.index(x)))


def scaled(fn: Callable) -> Callable:
    def rule(qd):
        got, kept, *_ = order(qd, fn)
        return _keeping(got, kept, K)

    return rule


RULES: dict[str, Callable] = {
    "shipped": shipped,
    "kept firsts within 5": kept_within(5),
    "kept firsts within 3": kept_within(3),
    "text's first within 5": kept_within(5, text_only=True),
    "final k in reciprocal-rank order": reciprocal_order,
    "text share of its own best": scaled(lambda b, c: b / max(b.max(), 1e-12)),
    "text share x 1.25": scaled(lambda b, c: 1.25 * b / c),
    "text share x 1.5": scaled(lambda b, c: 1.5 * b / c),
    "text share, square root": scaled(lambda b, c: np.sqrt(b / c)),
}


def metrics(lists, rel) -> np.ndarray:
    out = np.zeros(3)
    for got, r in zip(lists, rel, strict=True):
        r = set(r)
        out += [
            len(r & set(got[:5])) / min(len(r), 5),
            len(r & set(got[:10])) / min(len(r), 10),
            next((1 / (i + 1) for i, x in enumerate(got[:10]) if x in r), 0.0),
        ]
    return out / len(lists)


def main() -> None:
    sets = {}
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            d = pickle.load(f)
        for i, qd in enumerate(d["q"]):
            qd["question"], qd["texts"] = d["questions"][i], d["texts"]
        name = f"{d['set']} ({len(d['q'])} q)"
        sets[name] = d
        same = sum(shipped(qd) == qd["got"][:K] for qd in d["q"])
        low = answer = 0
        for qd, rel in zip(d["q"], d["relevant"], strict=True):
            got, _kept, tb, *_ = order(qd)
            final = _keeping(got, _kept, K)
            if tb and next(iter(tb)) in final[7:]:
                low += 1
                answer += next(iter(tb)) in set(rel)
        print(
            f"{name}: shipped reproduced on {same}; the text leg's first returned 8th-10th on {low},"
            f" an answer on {answer}"
        )
    print("recall@5 / recall@10 / MRR@10")
    for rn, rule in RULES.items():
        cells = [
            " / ".join(f"{x:.3f}" for x in metrics([rule(qd) for qd in d["q"]], d["relevant"])) for d in sets.values()
        ]
        print(f"  {rn:34s} " + "  |  ".join(cells))


if __name__ == "__main__":
    main()
