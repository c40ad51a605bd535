"""LanceDB through the gate's ``MemoryTool`` protocol.

Scope -> one table (columns ``key``, ``text``, ``subject``, ``metadata`` (JSON),
``vector``); vectors from an efface embedder. ``forget`` acknowledges with exactly what
``table.delete`` returned (LanceDB 0.40: ``DeleteResult(num_deleted_rows, version)``).
The new version number is *not* an erasure epoch in the gate's sense: older versions stay
readable through ``checkout`` until ``optimize``/cleanup removes them, so ``epoch`` stays None.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now


def _q(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _table_names(db) -> list[str]:
    from ..audit.drivers.lancedb import _table_names as names

    return names(db)


class LanceDBTool:
    """A LanceDB database directory as a MemoryTool."""

    name = "lancedb"

    def __init__(self, path: "str | os.PathLike", *, embedder_spec: Any = None):
        lancedb = need("lancedb", "lancedb")
        self.db = lancedb.connect(os.fspath(path))
        self.embedder = embedder(embedder_spec)

    def _table(self, scope: str, create_with: list | None = None):
        if scope in _table_names(self.db):
            return self.db.open_table(scope)
        if create_with is None:
            return None
        return self.db.create_table(scope, data=create_with)

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        row = {"key": key, "text": text, "subject": subject or "",
               "metadata": json.dumps(dict(metadata or {}), ensure_ascii=False),
               "vector": self.embedder.embed([text])[0]}
        table = self._table(scope)
        if table is None:
            self._table(scope, [row])
            return
        table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([row])

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        table = self._table(scope)
        if table is None:
            return []
        rows = table.search(self.embedder.embed([query])[0]).metric("cosine").limit(k).to_list()
        return [ToolHit(r["key"], r["text"], 1.0 - float(r["_distance"]), json.loads(r["metadata"] or "{}"))
                for r in rows]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        check_selector(subject, keys)
        table = self._table(scope)
        if table is None:
            return ForgetAck(raw=None, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())
        parts = []
        if keys:
            parts.append(f"key IN ({', '.join(_q(k) for k in keys)})")
        if subject is not None:
            parts.append(f"subject = {_q(subject)}")
        raw = table.delete(" AND ".join(parts))
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())
