"""Chroma (PersistentClient directory). Scope = one collection.

Read paths probed: ``get`` by id, ``get`` with a metadata filter, a full listing,
``query`` by the deleted vectors (nearest neighbours), and ``get`` with
``where_document={"$contains": text}`` (Chroma's full-text path). Maintenance: the
``chroma vacuum`` command Chroma ships (it VACUUMs the SQLite file and prunes its log).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ...errors import InvalidInput
from ..model import ProbeResult, Selection, Targets
from .base import Call, count_returned, need, no_targets, version

_PAGE = 5000


class ChromaDriver:
    kind = "chroma"

    def __init__(self, collection: str | None = None):
        self.collection = collection or ""
        self._client = None
        self._col = None

    def library(self) -> str:
        return version("chromadb")

    def open(self, root: Path) -> None:
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        chromadb = need("chromadb", "chroma")
        from chromadb.config import Settings

        self._client = chromadb.PersistentClient(path=str(root), settings=Settings(anonymized_telemetry=False))
        names = [c if isinstance(c, str) else c.name for c in self._client.list_collections()]
        if not self.collection:
            if len(names) != 1:
                raise InvalidInput(f"the store has {len(names)} collections: name one with --collection")
            self.collection = names[0]
        if self.collection not in names:
            raise InvalidInput("no such collection in this Chroma store: check --collection")
        # embedding_function=None: the audit hands Chroma vectors itself and never lets it
        # load (or download) an embedding model.
        self._col = self._client.get_collection(self.collection, embedding_function=None)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client.clear_system_cache()
        self._client = self._col = None

    def _where(self, selection: Selection) -> dict:
        return {selection.subject_field: selection.subject}

    def targets(self, selection: Selection) -> Targets:
        include = ["documents", "embeddings"]
        if selection.ids is not None:
            got = self._col.get(ids=list(selection.ids), include=include)
        else:
            got = self._col.get(where=self._where(selection), include=include)
        if not got["ids"]:
            raise no_targets()
        vectors = np.asarray(got["embeddings"], dtype=np.float32)
        return Targets(tuple(got["ids"]), tuple(d or "" for d in got["documents"]), vectors)

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray]:
        mine = set(targets.ids)
        texts, vecs = [], []
        total = self._col.count()
        for offset in range(0, total, _PAGE):
            got = self._col.get(include=["documents", "embeddings"], limit=_PAGE, offset=offset)
            for i, d, e in zip(got["ids"], got["documents"], got["embeddings"]):
                if i not in mine:
                    texts.append(d or "")
                    vecs.append(e)
        return texts, np.asarray(vecs, dtype=np.float32).reshape(len(vecs), -1)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        if selection.ids is not None:
            return Call("collection.delete(ids=...)", self._col.delete(ids=list(selection.ids)))
        return Call("collection.delete(where={field: subject})", self._col.delete(where=self._where(selection)))

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        out = []
        got = self._col.get(ids=list(targets.ids), include=["documents"])
        out.append(ProbeResult("get by id", n, count_returned(targets, got["ids"], got["documents"]),
                               f"{len(got['ids'])} rows returned for {n} ids"))
        if selection.subject is not None:
            got = self._col.get(where=self._where(selection), include=["documents"])
            out.append(ProbeResult("get by metadata filter", n, count_returned(targets, got["ids"], got["documents"]),
                                   f"{len(got['ids'])} rows matched the subject filter"))
        ids, docs = [], []
        total = self._col.count()
        for offset in range(0, total, _PAGE):
            got = self._col.get(include=["documents"], limit=_PAGE, offset=offset)
            ids += got["ids"]
            docs += got["documents"]
        out.append(ProbeResult("full listing", n, count_returned(targets, ids, docs), f"{len(ids)} rows listed"))
        if len(targets.vectors) and total:
            q = self._col.query(query_embeddings=targets.vectors, n_results=min(10, total), include=["documents"])
            flat_ids = [i for row in q["ids"] for i in row]
            flat_docs = [d for row in q["documents"] for d in row]
            out.append(ProbeResult("nearest neighbours of the deleted vectors", n,
                                   count_returned(targets, flat_ids, flat_docs),
                                   f"{len(targets.vectors)} queries, k={min(10, total)}"))
        found = 0
        for text in targets.texts:
            if text:
                got = self._col.get(where_document={"$contains": text}, include=["documents"])
                found += bool(count_returned(targets, got["ids"], got["documents"]))
        out.append(ProbeResult("full text (where_document $contains)", n, found,
                               f"{n} queries, one per deleted text"))
        return out

    def maintenance(self, root: Path) -> list[Call]:
        # Chroma's own maintenance is its CLI's `vacuum`; run in a child process so it is
        # exactly what a user would run.
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; app()",
             "vacuum", "--path", str(root), "--force"],
            capture_output=True, text=True, timeout=600,
        )
        last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        if proc.returncode != 0:
            raise InvalidInput(f"`chroma vacuum` failed with exit code {proc.returncode}")
        return [Call("chroma vacuum --path DIR --force", last[0].strip())]

    def decoders(self):
        return ()
