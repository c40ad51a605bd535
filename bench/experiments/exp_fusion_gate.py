#!/usr/bin/env python
"""Fusion gates replayed offline on what recall's fusion is given (capture_fusion.py, which
also records the vector leg's background: the query's cosines with the tenant sample), on all
three sets (issue #36 item 2, session 25; not a benchmark of record).

    PYTHONPATH=src python bench/experiments/capture_fusion.py conversations-all minilm conv.pkl
    PYTHONPATH=src python bench/experiments/capture_fusion.py manpages minilm man.pkl 2000 982
    PYTHONPATH=src python bench/experiments/capture_fusion.py debian minilm deb.pkl 5000 500
    PYTHONPATH=src python bench/experiments/exp_fusion_gate.py conv.pkl man.pkl deb.pkl

The captures use the bench's cached float query vectors (bench_quality's ``efface.hybrid``
system, not its int8 ``efface.recall``). Columns: recall@5 (recall@1 on the bench_quality
sets), recall@10, MRR@10.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the replay's setup, shared with exp_fusion_confidence.py: a capture's legs on one union
# (parts), its order (ranked), a leg's best (best), the vector leg's scale (dbsf), each leg alone
from exp_fusion_confidence import SPREAD, K, parts, r_text, r_vec, ranked, scaled
from exp_fusion_confidence import leg_best as best

from efface.paths.recall import _keeping


def dbsf(v):
    return scaled(True, v, None)


def z_of(qd, cos):
    bg = qd.get("background")
    if bg is None or len(bg) < 10 or bg.std() == 0:
        return None
    return (float(cos.max()) - float(bg.mean())) / float(bg.std())


def standing(qd, cos, lo=SPREAD - 1.0, hi=SPREAD):
    z = z_of(qd, cos)
    if z is None:
        return 1.0
    return min(1.0, max(0.0, (z - lo) / (hi - lo)))


def shipped(qd, lo=SPREAD - 1.0, hi=SPREAD):
    union, cos, bm, ceiling = parts(qd)
    t = bm / ceiling if ceiling else bm
    v = dbsf(cos)
    w = standing(qd, cos, lo, hi)
    kept = best(union, bm, bm > 0) | (best(union, cos) if w >= 1.0 else set())
    return _keeping(ranked(union, t + w * v), kept, K)


def text_leg(qd):
    return r_text(qd, False)


def vec_leg(qd):
    return r_vec(qd, False)


def metrics(lists, rel, quality):
    per = []
    for got, r in zip(lists, rel, strict=True):
        c = 1 if quality else 5
        per.append(
            (
                len(r & set(got[:c])) / min(len(r), c),
                len(r & set(got[:10])) / min(len(r), 10),
                next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in r), 0.0),
            )
        )
    return tuple(round(float(x), 4) for x in np.array(per).mean(axis=0))


def as_coded(qd):
    """The rule in src/efface/paths/scores.py now (``_standing``, with the background)."""
    from efface.paths.scores import _standing

    union, cos, bm, ceiling = parts(qd)
    t = bm / ceiling if ceiling else bm
    w = _standing(union, cos, [], qd.get("background"))
    kept = best(union, bm, bm > 0) | (best(union, cos) if w >= 1.0 else set())
    return _keeping(ranked(union, t + w * dbsf(cos)), kept, K)


def band(lo: float, hi: float):
    return lambda qd: shipped(qd, lo, hi)


RULES = {
    "text leg": text_leg,
    "vector leg": vec_leg,
    "shipped (band 2-3)": shipped,
    "band 2.5-3.5": band(2.5, 3.5),
    "band 3-3.25": band(3.0, 3.25),
    "band 3-4": band(3.0, 4.0),
    "band 3.5-4.5": band(3.5, 4.5),
    "as coded (band 3-3.5)": as_coded,
}


def load(paths):
    out = []
    for p in paths:
        with open(p, "rb") as f:
            d = pickle.load(f)
        d["rel"] = [set(r) for r in d["relevant"]]
        d["quality"] = not d["set"].startswith("conversations")
        out.append((p, d))
    return out


def main(rules=RULES, sets=None) -> None:
    sets = sets or load(sys.argv[1:])
    for p, d in sets:
        got = [qd["got"] for qd in d["q"]]
        same = sum(shipped(qd)[:10] == g[:10] for qd, g in zip(d["q"], got, strict=True))
        as_run = metrics(got, d["rel"], d["quality"])
        print(f"{p}: {d['set']} {len(got)} q; shipped reproduced {same}/{len(got)}; as run {as_run}")
    names = [d["set"][:5] for _, d in sets]
    print(f"{'rule':34s} " + "  ".join(f"{n:22s}" for n in names))
    for name, rule in rules.items():
        row = [metrics([rule(qd) for qd in d["q"]], d["rel"], d["quality"]) for _, d in sets]
        print(f"{name:34s} " + "  ".join(" ".join(f"{x:.3f}" for x in m) + "  " for m in row))


if __name__ == "__main__":
    main()
