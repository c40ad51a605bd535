"""Chroma: its gate adapter (:class:`ChromaTool`) and its audit driver (:class:`ChromaDriver`).

Adapter (``efface.adapters.chroma`` is an alias of this module). Scope -> one Chroma
collection (created on first write, ``hnsw:space`` cosine); key -> Chroma id; subject ->
metadata field ``subject``. Vectors come from an efface embedder (``embedding_function=None``),
so Chroma never loads or downloads its default ONNX model. ``forget`` acknowledges with
exactly what ``collection.delete`` returned (Chroma 1.5.9: ``{'deleted': N}``) and nothing
else: no handle, no epoch, no propagation bound — which is right, since its HNSW file and
SQLite pages keep the deleted vectors and texts.

Audit driver (``efface audit chroma``): a PersistentClient directory; scope = one
collection. Read paths probed: ``get`` by id, ``get`` with a metadata filter, a full
listing, ``query`` by the deleted vectors (nearest neighbours), and ``get`` with
``where_document={"$contains": text}`` (Chroma's full-text path). Maintenance: the
``chroma vacuum`` command Chroma ships (it VACUUMs the SQLite file and prunes its log).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.driver import BaseDriver, Call, count_returned, no_targets, version
from ..audit.model import ProbeResult, Selection, Targets
from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now

# == the gate adapter ================================================================================
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")


class ChromaTool:
    """A Chroma ``PersistentClient`` directory (or any Chroma client) as a MemoryTool."""

    name = "chroma"

    def __init__(self, path: str | os.PathLike | None = None, *, client: Any = None, embedder_spec: Any = None):
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        chromadb = need("chromadb", "chroma")
        if client is None:
            from chromadb.config import Settings

            if path is None:
                raise TypeError("ChromaTool needs a path or a client")
            client = chromadb.PersistentClient(path=os.fspath(path), settings=Settings(anonymized_telemetry=False))
        self.client = client
        self.embedder = embedder(embedder_spec)

    def _collection(self, scope: str):
        if not _NAME.fullmatch(scope):
            raise InvalidInput(
                "a Chroma scope must be 3-512 characters of [a-zA-Z0-9._-], starting and ending "
                "with a letter or digit (it names the collection)"
            )
        return self.client.get_or_create_collection(scope, embedding_function=None, metadata={"hnsw:space": "cosine"})

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        meta = dict(metadata or {})
        if subject is not None:
            meta["subject"] = subject
        self._collection(scope).upsert(
            ids=[key], documents=[text], embeddings=self.embedder.embed([text]), metadatas=[meta or None]
        )

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        col = self._collection(scope)
        n = col.count()
        if not n:
            return []
        r = col.query(
            query_embeddings=self.embedder.embed([query]),
            n_results=min(k, n),
            include=["documents", "metadatas", "distances"],
        )
        return [
            ToolHit(i, d or "", 1.0 - dist, m or {})
            for i, d, m, dist in zip(r["ids"][0], r["documents"][0], r["metadatas"][0], r["distances"][0], strict=True)
        ]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        check_selector(subject, keys)
        col = self._collection(scope)
        if keys:
            where = {"subject": subject} if subject is not None else None
            raw = col.delete(ids=list(keys), where=where)
        else:
            raw = col.delete(where={"subject": subject})
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())


# == the audit driver ================================================================================
_PAGE = 5000


class ChromaDriver(BaseDriver):
    kind = "chroma"

    def __init__(self, collection: str | None = None):
        self.collection = collection or ""
        self._client: Any = None
        self._collection: Any = None

    def library(self) -> str:
        return version("chromadb")

    def open(self, root: Path) -> None:
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        chromadb = need("chromadb", "chroma", for_audit=True)
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
        self._collection = self._client.get_collection(self.collection, embedding_function=None)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client.clear_system_cache()
        self._client = self._collection = None

    @property
    def _col(self) -> Any:
        """The open collection (chromadb ships no types)."""
        return self._opened(self._collection)

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
            for i, d, e in zip(got["ids"], got["documents"], got["embeddings"], strict=True):
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
        out.append(
            ProbeResult(
                "get by id",
                n,
                count_returned(targets, got["ids"], got["documents"]),
                f"{len(got['ids'])} rows returned for {n} ids",
            )
        )
        if selection.subject is not None:
            got = self._col.get(where=self._where(selection), include=["documents"])
            out.append(
                ProbeResult(
                    "get by metadata filter",
                    n,
                    count_returned(targets, got["ids"], got["documents"]),
                    f"{len(got['ids'])} rows matched the subject filter",
                )
            )
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
            out.append(
                ProbeResult(
                    "nearest neighbours of the deleted vectors",
                    n,
                    count_returned(targets, flat_ids, flat_docs),
                    f"{len(targets.vectors)} queries, k={min(10, total)}",
                )
            )
        found = 0
        for text in targets.texts:
            if text:
                got = self._col.get(where_document={"$contains": text}, include=["documents"])
                found += bool(count_returned(targets, got["ids"], got["documents"]))
        out.append(ProbeResult("full text (where_document $contains)", n, found, f"{n} queries, one per deleted text"))
        return out

    def maintenance(self, root: Path) -> list[Call]:
        # Chroma's own maintenance is its CLI's `vacuum`; run in a child process so it is
        # exactly what a user would run.
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; app()",
                "vacuum",
                "--path",
                str(root),
                "--force",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        if proc.returncode != 0:
            raise InvalidInput(f"`chroma vacuum` failed with exit code {proc.returncode}")
        return [Call("chroma vacuum --path DIR --force", last[0].strip())]
