#!/usr/bin/env python
"""What a lexical embedder's cosine adds to recall's text leg (issue #36, session 27; not a
benchmark of record). Replays ``capture_fusion.py``'s records of the hashing embedder (every
query's legs as fusion saw them) under rules for the cosine, and counts, in every group of
records the text leg scores exactly alike within its first ten, the pairs (an answer, a record
that is not one) that the cosine puts answer-first and those the order by id does.

    PYTHONPATH=src python bench/experiments/capture_fusion.py debian hashing /tmp/cap-debian.pkl 100000 1000
    PYTHONPATH=src python bench/experiments/exp_lexical_ties.py /tmp/cap-debian.pkl [...]

Rules (recall@1 / @5 / @10 / MRR@10 each):

- ``text leg``: BM25 order, ties by id (``efface.fts_leg``);
- ``cosine breaks ties``: main before session 27 (text scores, then the cosine, then id);
- ``text order, cosine fills``: session 27 (the text leg's order; the cosine only orders the
  records the words did not find);
- ``cosine for the own text only``: session 28 (shipped): as the one above, but a record whose
  cosine says it holds the query's own text (``SAME_TEXT``) goes first among its equals;
- ``+ w * cosine``: the cosine's standard score (as a meaning leg's) added at weight w;
- ``cosine votes by standing``: the cosine voting as a meaning leg does (``_standing``);
- ``coordination (words | stems)``: the first 20 re-scored as ``paths.scores.coordinated``
  does beside a meaning leg, by folded words or by Porter stems (nltk, when installed);
- ``cosine as coordination``: each text share times sqrt(its cosine over the best cosine).
"""

from __future__ import annotations

import functools
import pickle
import sys

import numpy as np

from efface.paths.recall import SAME_TEXT
from efface.paths.scores import _scaled, _standing
from efface.text import content_words, query_words, words


def metrics(lists, rel) -> np.ndarray:
    out = np.zeros(4)
    for got, r in zip(lists, rel, strict=True):
        r = set(r)
        out += [
            len(r & set(got[:1])) / min(len(r), 1),
            len(r & set(got[:5])) / min(len(r), 5),
            len(r & set(got[:10])) / min(len(r), 10),
            next((1 / (i + 1) for i, x in enumerate(got[:10]) if x in r), 0.0),
        ]
    return out / len(lists)


def legs(q):
    v = t = None
    for vec, ids, raw, ceil in q["legs"]:
        if vec:
            v = (ids, raw)
        else:
            t = (ids, raw, ceil)
    return v, t


def fused(q):
    """The union, each record's text share and the cosine's standard score and raw cosine."""
    (vids, vraw), (tids, traw, ceil) = legs(q)
    union = np.union1d(vids, tids)
    share, z, cos = np.zeros(len(union)), np.zeros(len(union)), np.zeros(len(union))
    if len(tids):
        share[np.searchsorted(union, tids)] = traw / ceil
    z[np.searchsorted(union, vids)] = _scaled(True, vids, vraw, None)
    cos[np.searchsorted(union, vids)] = vraw
    return union, share, z, cos, (vids, vraw, tids)


def first(union, *keys, k=10):
    return union[np.lexsort((union, *keys))][:k].tolist()


def stemmer():
    try:
        from nltk.stem.porter import PorterStemmer
    except ImportError:
        return None
    return functools.lru_cache(None)(PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM).stem)


def rules(d):
    stem = stemmer()

    def coordinated(q, i, by):
        union, share, _z, _cos, _ = fused(q)
        o = np.lexsort((union, -share))[:20]
        ids, s = union[o], share[o]
        wanted = content_words(query_words(d["questions"][i]))
        if by == "stems":
            want = {stem(w) for w in wanted}
            held = [len(want & {stem(w) for w in words(d["texts"][r])}) / max(1, len(want)) for r in ids]
        else:
            want = set(wanted)
            held = [len(want & set(words(d["texts"][r]))) / max(1, len(want)) for r in ids]
        return first(ids, -(s * np.sqrt(np.asarray(held) if want else 1.0)))

    def cosine_coordination(q, i):
        union, share, _z, cos, _ = fused(q)
        o = np.lexsort((union, -share))[:20]
        ids, s, c = union[o], share[o], np.clip(cos[o], 0, None)
        return first(ids, -(s * np.sqrt(c / c.max() if c.max() > 0 else 1.0)))

    def standing(q, i):
        union, share, z, _cos, (vids, vraw, tids) = fused(q)
        w = _standing(vids, vraw, sorted(set(vids.tolist()) - set(tids.tolist())), None)
        return first(union, -z, -(share + w * z))

    out = {
        "text leg": lambda q, i: first(*(lambda u, s, *_: (u[s > 0], -s[s > 0]))(*fused(q))),
        "cosine breaks ties": lambda q, i: first(*(lambda u, s, z, *_: (u, -z, -s))(*fused(q))),
        "text order, cosine fills": lambda q, i: first(
            *(lambda u, s, z, *_: (u, -np.where(s > 0, 0, z), -s))(*fused(q))
        ),
    }
    out["cosine for the own text only"] = lambda q, i: first(
        *(lambda u, s, z, c, _: (u, -np.where((s > 0) & (c < SAME_TEXT), 0, z), -s))(*fused(q))
    )
    for w in (0.01, 0.05, 0.1):
        out[f"+ {w} * cosine"] = lambda q, i, w=w: first(*(lambda u, s, z, *_: (u, -z, -(s + w * z)))(*fused(q)))
    out["cosine votes by standing"] = standing
    out["coordination (words)"] = lambda q, i: coordinated(q, i, "words")
    if stem is not None:
        out["coordination (stems)"] = lambda q, i: coordinated(q, i, "stems")
    out["cosine as coordination"] = cosine_coordination
    return out


def tie_pairs(d) -> dict[str, int]:
    got = {"groups": 0, "cosine answer first": 0, "cosine answer after": 0, "id answer first": 0, "id answer after": 0}
    for q, r in zip(d["q"], d["relevant"], strict=True):
        (vids, vraw), (tids, traw, _c) = legs(q)
        cos = dict(zip(vids.tolist(), vraw.tolist(), strict=True))
        o = np.lexsort((tids, -traw))
        ids, sc = tids[o], traw[o]
        if not len(sc):
            continue
        tenth = sc[min(9, len(sc) - 1)]
        for s in np.unique(sc[sc >= tenth]):
            group = ids[sc == s].tolist()
            yes, no = [x for x in group if x in r], [x for x in group if x not in r]
            if not (yes and no):
                continue
            got["groups"] += 1
            for a in yes:
                for b in no:
                    got["cosine answer first"] += cos.get(a, -9) > cos.get(b, -9)
                    got["cosine answer after"] += cos.get(a, -9) < cos.get(b, -9)
                    got["id answer first"] += a < b
                    got["id answer after"] += a > b
    return got


def main() -> None:
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            d = pickle.load(f)
        print(f"{d['set']} ({d['embedder']}): {len(d['q'])} queries")
        for name, rule in rules(d).items():
            m = metrics([rule(q, i) for i, q in enumerate(d["q"])], d["relevant"])
            print(f"  {name:28s} " + " / ".join(f"{x:.4f}" for x in m))
        print("  ties in the text leg's first ten:", tie_pairs(d))
        own = sum(bool((fused(q)[3] >= SAME_TEXT).any()) for q in d["q"])
        print(f"  queries with a record holding their own text (cosine >= {SAME_TEXT}): {own}")


if __name__ == "__main__":
    main()
