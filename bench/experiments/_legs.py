"""What the fusion experiments share: a store built from a corpus, and a query's document
frequencies as the full-text leg reads them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import efface
from efface.text import query_words


def build(corpus, embedder, vectors) -> efface.Store:
    """A store (no background compactor) holding ``corpus``'s documents with their ``vectors``."""
    store = efface.open(Path(tempfile.mkdtemp()) / "s", embedder=embedder, background=False)
    for s in range(0, len(corpus.docs), 5000):
        store.write_many(
            [{"key": f"d{i}", "text": corpus.docs[i]} for i in range(s, min(s + 5000, len(corpus.docs)))],
            tenant="t",
            purpose="p",
            subject="x",
            embeddings=vectors[s : s + 5000],
        )
    store.compact()
    return store


def dfs(store, text):
    """Records holding each distinct term of the query (0: a term no record holds)."""
    words = query_words(text)
    terms = store._fts._text.index_terms(words)
    df = store._fts._text.document_frequency(words)
    out = {}
    for w, t in zip(words, terms, strict=True):
        if t is not None:
            out[t] = df.get(w, 0)
    return list(out.values())


def n_rows(store):
    return store._origin._r().execute("SELECT count(*) FROM fts").fetchone()[0]
