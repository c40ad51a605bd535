#!/usr/bin/env python
"""Which of LanceDB's full-text options makes its lead on the conversational set: its FTS
index built with the defaults, without stop-word removal, without stemming, without both;
recall@10 on the ``--quick`` tenants, one table per tenant (issue #36; not a benchmark of
record).

    PYTHONPATH=src python bench/experiments/lancedb_fts_options_conversations.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("LANCE_LOG", "error")
import lancedb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import conversations as cv

full = cv.build()
c = full.only(list(range(0, len(full.pairs), 4)))
db = lancedb.connect(tempfile.mkdtemp())


def recall10(label: str, **options) -> float:
    tables = {}
    for t in sorted(set(c.tenants)):
        ids = [i for i, x in enumerate(c.tenants) if x == t]
        data = pa.table({"id": pa.array(ids, pa.int64()), "text": pa.array([c.turns[i] for i in ids])})
        tables[t] = db.create_table(f"{label}_{t}", data=data)
        tables[t].create_index("text", config=lancedb.index.FTS(**options))
    total = 0.0
    for q in c.questions:
        got = {r["id"] for r in tables[q.tenant].search(q.text, query_type="fts").limit(10).to_list()}
        total += len(q.evidence & got) / min(len(q.evidence), 10)
    return round(total / len(c.questions), 3)


print("defaults", recall10("defaults"))
print("no stop-word removal", recall10("stop", remove_stop_words=False))
print("no stemming", recall10("stem", stem=False))
print("neither", recall10("neither", stem=False, remove_stop_words=False))
