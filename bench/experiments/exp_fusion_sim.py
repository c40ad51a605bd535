#!/usr/bin/env python
"""Text-leg and fusion rules compared on fusion_sim's model of recall (issue #36 item 2).

PYTHONPATH=src python bench/experiments/exp_fusion_sim.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fusion_sim as fs

from efface.paths.recall import _keeping

K = 10
SPREAD = 3.0


def ranked(union, total, tie=None):
    tie = np.zeros(len(union)) if tie is None else tie
    return union[np.lexsort((union, -tie, -total))].tolist()


def best(union, raw, mask=None):
    m = np.ones(len(union), dtype=bool) if mask is None else mask
    if not m.any():
        return set()
    idx = np.flatnonzero(m)
    return {int(union[idx[np.lexsort((union[idx], -raw[idx]))[0]]])}


def dbsf(cos):
    mu, sd = float(cos.mean()), float(cos.std())
    if sd == 0:
        return np.full(len(cos), 0.5)
    return np.maximum(0.0, (cos - mu) / (2 * SPREAD * sd) + 0.5)


def shipped(q: fs.Q, lexical: bool):
    t = q.bm / q.ceiling if q.ceiling else q.bm
    v = dbsf(q.cos)
    if lexical:
        return _keeping(ranked(q.union, t, v), best(q.union, q.bm, q.matched), K)
    return _keeping(ranked(q.union, t + v), best(q.union, q.bm, q.matched) | best(q.union, q.cos), K)


def text_only(q, lexical):
    return q.text_order


def vec_only(q, lexical):
    return q.vec_order


RULES = {"text": text_only, "vector": vec_only, "shipped": shipped}


def run(sets, rules, weights=None):
    weights = weights or {"idf": None}
    for s in sets:
        ix = fs.Index(s)
        for wname, w in weights.items():
            t0 = time.time()
            qs = fs.build(s, ix, weight=w)
            print(f"\n{s.name}/{s.embedder} text-weight={wname} ({len(qs)} q, {time.time() - t0:.0f}s)")
            for name, rule in rules.items():
                lists = [rule(q, s.lexical) for q in qs]
                line = f"  {name:28s} {fs.metrics(lists, s.relevant)}"
                if s.name == "conversations":
                    kinds = np.asarray(s.kinds)
                    line += "  " + " ".join(
                        f"{k[:4]}{fs.metrics(lists, s.relevant, kinds == k)[1]:.3f}"
                        for k in ("single-hop", "multi-hop", "temporal")
                    )
                print(line, flush=True)


if __name__ == "__main__":
    emb = sys.argv[1] if len(sys.argv) > 1 else "minilm"
    sets = [fs.load(n, emb) for n in ("conversations", "manpages", "debian")]
    run(sets, RULES)
