#!/usr/bin/env python
"""Does dropping English stop words from a question explain LanceDB's lead in full text on
the conversational set? FTS5 BM25 (porter, one table per tenant, as bench_conversations.py's
``bm25_porter``) over every query word, over the words less Lucene's 33 stop words, and less
scikit-learn's 318 (needs scikit-learn); recall@10 on the ``--quick`` tenants (issue #36; not
a benchmark of record).

    PYTHONPATH=src python bench/experiments/bm25_stopwords_conversations.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import conversations as cv
from efface.text import index_text, query_words

LUCENE = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

full = cv.build()
c = full.only(list(range(0, len(full.pairs), 4)))
db = apsw.Connection(":memory:")
for t in sorted(set(c.tenants)):
    db.execute(f"CREATE VIRTUAL TABLE t{t} USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    with db:
        db.executemany(
            f"INSERT INTO t{t}(rowid, text) VALUES(?,?)",
            ((i, index_text(x)) for i, x in enumerate(c.turns) if c.tenants[i] == t),
        )


def recall10(stop: set[str]) -> float:
    total = 0.0
    for q in c.questions:
        words = [w for w in query_words(q.text) if w not in stop]
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        sql = f"SELECT rowid FROM t{q.tenant} WHERE t{q.tenant} MATCH ? ORDER BY bm25(t{q.tenant}) LIMIT 10"
        got = {r[0] for r in db.execute(sql, (match,))}
        total += len(q.evidence & got) / min(len(q.evidence), 10)
    return round(total / len(c.questions), 3)


print("every word", recall10(set()))
print("less Lucene's stop words", recall10(LUCENE))
try:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    print("less scikit-learn's stop words", recall10(set(ENGLISH_STOP_WORDS)))
except ImportError:
    print("scikit-learn not installed")
