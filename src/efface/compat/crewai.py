"""A CrewAI memory storage backend on efface: ``StorageBackend`` whose deletes and resets are
forgets with receipts.

``EffaceStorage(store, tenant="acme")`` implements CrewAI's
``crewai.memory.storage.backend.StorageBackend`` protocol, so ``Memory(storage=...)`` keeps
its records in efface.

How CrewAI's names map to efface (see docs/crewai.md):

* **Scope.** Every record is an efface record of ``tenant`` under ``purpose``; its **subject**
  is the record's ``source`` (CrewAI's "user ID, session ID" provenance) or else the
  constructor's ``subject``.
* **Keys.** A record is ``key_prefix + <scope path> + "#" + quote(id)``, each segment of the
  scope path percent-quoted and followed by ``/`` (scope ``/users/alice`` ->
  ``crewai/users/alice/#<id>``), so a scope and everything under it is one key prefix:
  ``reset(scope)`` and ``delete(scope_prefix=...)`` are one forget each.
* **Records.** The text is the record's ``content`` (what a forget erases and ``verify``
  checks byte by byte); the metadata holds the other fields and the embedding CrewAI
  computed (float32, base64), which ``search`` ranks by as LanceDBStorage does (score
  ``1 / (1 + L2 distance)``, exact): CrewAI hands a storage a query vector, never its text.
* **Deletes** return the count CrewAI expects; the receipts are kept in
  :attr:`EffaceStorage.receipts` (newest last; :attr:`last_receipt`), those of the newest
  call in :attr:`last_deletion`.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import threading
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
from crewai.memory.types import MemoryRecord, ScopeInfo

from ..errors import InvalidInput
from ..model import Memory, Receipt
from ._listing import receipt_log, scan_all

__all__ = ["EffaceStorage"]

_META = "crewai"


def _segments(scope: str | None) -> list[str]:
    return [s for s in (scope or "/").split("/") if s]


def _path(scope: str | None) -> str:
    """The normal form of a scope: ``/a/b`` (root: ``/``)."""
    return "/" + "/".join(_segments(scope))


class EffaceStorage:
    """A CrewAI memory ``StorageBackend`` over an efface store (anything with ``efface.Store``'s
    methods: an embedded store or a client of a served one).

    ``tenant``, ``purpose``, ``basis``: the claim every record is written under; ``subject``:
    the data subject of a record with no ``source``. ``keep_receipts``: how many receipts
    :attr:`receipts` keeps.
    """

    def __init__(
        self,
        store: Any,
        *,
        tenant: str,
        subject: str | None = None,
        purpose: str = "memory",
        basis: str = "consent",
        key_prefix: str = "crewai/",
        keep_receipts: int = 1000,
    ) -> None:
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'crewai/'")
        self.store = store
        self.tenant = tenant
        self.subject = subject
        self.purpose = purpose
        self.basis = basis
        self.key_prefix = key_prefix
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
        """Receipts of this storage's deletes, resets and replacing updates, oldest first."""
        self.last_deletion: list[Receipt] = []
        """The receipts of the newest ``delete`` or ``reset``."""
        self._lock = threading.RLock()

    @property
    def last_receipt(self) -> Receipt | None:
        """The newest receipt (None before the first delete)."""
        return self.receipts[-1] if self.receipts else None

    # -- keys and records ----------------------------------------------------------------------
    def _scope_prefix(self, scope: str | None) -> str:
        return self.key_prefix + "".join(quote(s, safe="") + "/" for s in _segments(scope))

    def _key(self, record: MemoryRecord) -> str:
        return f"{self._scope_prefix(record.scope)}#{quote(record.id, safe='')}"

    def _subject_of(self, record: MemoryRecord) -> str:
        subject = record.source or self.subject
        if not subject:
            raise InvalidInput("a memory needs a data subject: give it a source, or the storage subject=")
        return subject

    def _item(self, record: MemoryRecord) -> dict[str, Any]:
        if not record.content or not record.content.strip():
            raise InvalidInput("a memory needs content: efface stores and erases text")
        fields = record.model_dump(mode="json", exclude={"content", "embedding"})
        if record.embedding:
            fields["vec"] = base64.b64encode(np.asarray(record.embedding, dtype="<f4").tobytes()).decode()
        return {"key": self._key(record), "text": record.content, "metadata": {_META: fields}}

    def _record(self, mem: Memory) -> MemoryRecord:
        fields = dict(mem.metadata[_META])
        vec = fields.pop("vec", None)
        record = MemoryRecord.model_validate({**fields, "content": mem.text})
        if vec is not None:
            record.embedding = np.frombuffer(base64.b64decode(vec), dtype="<f4").astype(float).tolist()
        return record

    def _scan(self, scope_prefix: str | None = None) -> list[Memory]:
        return scan_all(self.store, tenant=self.tenant, purpose=self.purpose, prefix=self._scope_prefix(scope_prefix))

    def _keep(self, receipt: Receipt) -> Receipt:
        self.receipts.append(receipt)
        self.last_deletion.append(receipt)
        return receipt

    def _write(self, records: list[MemoryRecord]) -> None:
        by_subject: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            by_subject.setdefault(self._subject_of(r), []).append(self._item(r))
        for subject, items in by_subject.items():
            self.store.write_many(
                items, tenant=self.tenant, subject=subject, purpose=self.purpose, basis=self.basis, replace=True
            )

    def _find(self, record_id: str) -> Memory | None:
        suffix = "#" + quote(record_id, safe="")
        return next((m for m in self._scan() if m.key.endswith(suffix)), None)

    # -- StorageBackend ------------------------------------------------------------------------
    def save(self, records: list[MemoryRecord]) -> None:
        """Write the records (one transaction per subject); a record whose id is stored is
        replaced."""
        with self._lock:
            self.last_deletion = []
            ids = {r.id for r in records}
            for mem in self._scan():
                old = unquote(mem.key.rsplit("#", 1)[1])
                if old in ids and mem.key not in {self._key(r) for r in records if r.id == old}:
                    self._keep(self.store.forget(tenant=self.tenant, key=mem.key))  # moved to another scope
            self._write(list({r.id: r for r in records}.values()))

    def update(self, record: MemoryRecord) -> None:
        """Replace the record with the same id (wherever its scope was)."""
        self.save([record])

    def get_record(self, record_id: str) -> MemoryRecord | None:
        mem = self._find(record_id)
        return None if mem is None else self._record(mem)

    def search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        """The records nearest ``query_embedding`` (exact L2, scored ``1 / (1 + distance)``),
        under ``scope_prefix``, in one of ``categories``, matching ``metadata_filter``, at
        least ``min_score``; the best ``limit``."""
        query = np.asarray(query_embedding, dtype=np.float32)
        scored = []
        for mem in self._scan(scope_prefix):
            record = self._record(mem)
            if not self._matches(record, categories, metadata_filter, None) or not record.embedding:
                continue
            vec = np.asarray(record.embedding, dtype=np.float32)
            if vec.shape != query.shape:
                continue
            score = 1.0 / (1.0 + float(np.sum((vec - query) ** 2)))
            if score >= min_score:
                scored.append((record, score))
        scored.sort(key=lambda pair: -pair[1])
        return scored[:limit]

    def delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        """Forget the records that match every criterion given (none: every record); returns
        how many were erased. A scope alone is one forget by key prefix; otherwise one forget
        per record. The receipts are :attr:`last_deletion`."""
        with self._lock:
            self.last_deletion = []
            if not (categories or record_ids or older_than or metadata_filter):
                return len(
                    self._keep(self.store.forget(tenant=self.tenant, prefix=self._scope_prefix(scope_prefix))).erased
                )
            wanted = None if record_ids is None else set(record_ids)
            erased = 0
            for mem in self._scan(scope_prefix):
                record = self._record(mem)
                if wanted is not None and record.id not in wanted:
                    continue
                if self._matches(record, categories, metadata_filter, older_than):
                    erased += len(self._keep(self.store.forget(tenant=self.tenant, key=mem.key)).erased)
            return erased

    @staticmethod
    def _matches(
        record: MemoryRecord,
        categories: list[str] | None,
        metadata_filter: dict[str, Any] | None,
        older_than: datetime | None,
    ) -> bool:
        if categories and not any(c in record.categories for c in categories):
            return False
        if metadata_filter and not all(record.metadata.get(k) == v for k, v in metadata_filter.items()):
            return False
        return not (older_than is not None and not record.created_at < older_than)

    def list_records(self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0) -> list[MemoryRecord]:
        """The records under the scope, newest ``created_at`` first."""
        if limit <= 0 or offset < 0:
            return []
        records = sorted((self._record(m) for m in self._scan(scope_prefix)), key=lambda r: r.created_at, reverse=True)
        return records[offset : offset + limit]

    def get_scope_info(self, scope: str) -> ScopeInfo:
        path = _path(scope)
        records = [self._record(m) for m in self._scan(path)]
        return ScopeInfo(
            path=path,
            record_count=len(records),
            categories=sorted({c for r in records for c in r.categories}),
            oldest_record=min((r.created_at for r in records), default=None),
            newest_record=max((r.created_at for r in records), default=None),
            child_scopes=self.list_scopes(path),
        )

    def list_scopes(self, parent: str = "/") -> list[str]:
        """The immediate child scopes under ``parent`` that hold records."""
        base = _segments(parent)
        children = set()
        for mem in self._scan(parent):
            segments = [unquote(s) for s in mem.key[len(self.key_prefix) :].rsplit("#", 1)[0].split("/") if s]
            if len(segments) > len(base):
                children.add("/" + "/".join(segments[: len(base) + 1]))
        return sorted(children)

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for mem in self._scan(scope_prefix):
            for c in self._record(mem).categories:
                counts[c] = counts.get(c, 0) + 1
        return counts

    def count(self, scope_prefix: str | None = None) -> int:
        return len(self._scan(scope_prefix))

    def reset(self, scope_prefix: str | None = None) -> None:
        """Forget every record under the scope (None: all of this storage's); the receipt is
        :attr:`last_receipt`."""
        self.delete(scope_prefix=scope_prefix)

    def close(self) -> None:
        """Nothing to release: the efface store is the caller's."""

    async def asave(self, records: list[MemoryRecord]) -> None:
        await asyncio.to_thread(self.save, records)

    async def asearch(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        return await asyncio.to_thread(
            self.search, query_embedding, scope_prefix, categories, metadata_filter, limit, min_score
        )

    async def adelete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        return await asyncio.to_thread(self.delete, scope_prefix, categories, record_ids, older_than, metadata_filter)
