"""The naive memory store the demo replays the incidents against: what tools do today
(a tombstone for point reads, a lazily rebuilt vector index, a chunk cache keyed by content)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class _Chunk:
    tenant: str
    key: str
    digest: str  # content hash: the chunk cache's key
    vector: np.ndarray


class NaiveStore:
    """NOT efface: the comparison. A memory store built the way the incident systems were.

    * ``forget`` deletes from the primary and answers a bare count, at once.
    * The vector index and the keyword index absorb deletions only in ``rebuild()`` (a
      15-minute compaction cycle in the incident; the demo never reaches it). Recall takes
      their candidates as they are: the tombstone filters point reads, not candidate sets.
    * The reranker takes each candidate's text from a chunk cache keyed by content hash,
      which a delete by key cannot find, so it is never invalidated.
    * Reads may be served by a replica that applies the primary's log when ``replicate()``
      runs; a listing of a prefix goes through a read-through cache (90 s TTL) whose entry a
      forget invalidates, so the next listing is recomputed from the primary.
    * Records kept under the tenant's 30-day retention are copied to a compliance archive on
      another host, which ``forget`` does not reach.
    """

    LISTING_TTL_S = 90.0

    def __init__(self, embedder: Any):
        self._embed = embedder.embed
        self.primary: dict[tuple[str, str], str] = {}
        self.replica: dict[tuple[str, str], str] = {}
        self._log: list[tuple[str, tuple[str, str], str | None]] = []
        self.archive: dict[tuple[str, str], str] = {}
        self.chunk_cache: dict[str, str] = {}
        self.ann: list[_Chunk] = []
        self.words: dict[str, set[int]] = {}
        self.subjects: dict[tuple[str, str], str] = {}
        self._listings: dict[tuple[str, str], tuple[float, list[str]]] = {}

    @staticmethod
    def chunks(text: str) -> list[str]:
        return [c.strip() for c in text.split(";") if c.strip()]

    def write(self, key: str, text: str, *, tenant: str, subject: str, archive: bool = False) -> None:
        self.primary[(tenant, key)] = text
        self.subjects[(tenant, key)] = subject
        self._log.append(("put", (tenant, key), text))
        if archive:
            self.archive[(tenant, key)] = text
        for chunk in self.chunks(text):
            digest = hashlib.sha256(chunk.encode()).hexdigest()
            self.chunk_cache[digest] = chunk
            self.ann.append(_Chunk(tenant, key, digest, self._embed([chunk])[0]))
            for word in set(re.findall(r"\w+", chunk.lower())):
                self.words.setdefault(word, set()).add(len(self.ann) - 1)

    def replicate(self) -> None:
        for op, where, text in self._log:
            if op == "put":
                assert text is not None  # a put always carries its text
                self.replica[where] = text
            else:
                self.replica.pop(where, None)
        self._log.clear()

    def forget(self, *, tenant: str, subject: str | None = None, prefix: str | None = None) -> dict:
        gone = [
            (t, k)
            for (t, k) in self.primary
            if t == tenant
            and (subject is None or self.subjects[(t, k)] == subject)
            and (prefix is None or k.startswith(prefix))
        ]
        for where in gone:
            del self.primary[where]
            self._log.append(("delete", where, None))
        for t, p in list(self._listings):
            if t == tenant:
                del self._listings[(t, p)]
        return {"status": "erased", "keys": len(gone)}

    def read(self, key: str, *, tenant: str, host: str = "primary") -> str | None:
        return {"primary": self.primary, "replica": self.replica, "archive": self.archive}[host].get((tenant, key))

    def list_prefix(self, prefix: str, *, tenant: str, now: float) -> list[str]:
        cached = self._listings.get((tenant, prefix))
        if cached and now - cached[0] < self.LISTING_TTL_S:
            return cached[1]
        keys = sorted(k for (t, k) in self.primary if t == tenant and k.startswith(prefix))
        self._listings[(tenant, prefix)] = (now, keys)
        return keys

    def recall(self, query: str, *, tenant: str, k: int = 5) -> list[dict]:
        q = self._embed([query])[0]
        mine = [i for i, c in enumerate(self.ann) if c.tenant == tenant]
        by_vector = sorted(mine, key=lambda i: -float(q @ self.ann[i].vector))[:k]
        words = re.findall(r"\w+", query.lower())
        by_words = set.intersection(*(self.words.get(w, set()) for w in words)) if words else set()
        by_words = {i for i in by_words if self.ann[i].tenant == tenant}
        ranked = sorted(set(by_vector) | by_words, key=lambda i: -float(q @ self.ann[i].vector))[:k]
        return [
            {
                "key": self.ann[i].key,
                "text": self.chunk_cache[self.ann[i].digest],
                "via": (["ann"] if i in by_vector else []) + (["fts"] if i in by_words else []),
            }
            for i in ranked
        ]


# == Probes =========================================================================================
