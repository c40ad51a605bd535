"""The origin protocol: the single source of truth behind every read path.

An origin stores records, claims, subjects, lineage, the change log that derived
artifacts replay, receipts and the erasure ledger, and gives out strictly increasing
epochs inside the transaction that commits a mutation. The embedded store implements
it on SQLite (``origin.sqlite``); PostgreSQL will implement the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Protocol, Sequence


@dataclass(frozen=True)
class RecordRow:
    id: int
    tenant: str
    key: str
    text: str
    metadata: str
    sources: str
    updated_at: float


@dataclass(frozen=True)
class ClaimRow:
    id: int
    record_id: int
    key: str
    subject: str
    purpose: str
    basis: str
    expires_at: float | None


@dataclass(frozen=True)
class NewRecord:
    key: str
    text: str
    metadata: str
    sources: tuple[str, ...]
    embedding: bytes
    subject: str
    purpose: str
    basis: str
    expires_at: float | None


class Tx(Protocol):
    """One open write transaction. Everything done through it commits together."""

    epoch: int

    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int: ...
    def add_claim(self, record_id: int, subject: str, purpose: str, basis: str,
                  expires_at: float | None, now: float) -> None: ...
    def record_id(self, tenant: str, key: str) -> int | None: ...
    def match_claims(self, tenant: str, subject: str | None, purpose: str | None,
                     prefix: str | None, key: str | None) -> list[ClaimRow]: ...
    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]: ...
    def release(self, claim_ids: Sequence[int]) -> None: ...
    def remaining_claims(self, record_id: int) -> list[ClaimRow]: ...
    def erase_record(self, record_id: int) -> None: ...
    def log_changes(self, tenant: str, puts: Iterable[int], drops: Iterable[int]) -> None: ...
    def save_receipt(self, handle: str, kind: str, tenant_h: str, body: dict, now: float) -> None: ...
    def append_ledger(self, kind: str, handle: str | None, body: dict, now: float) -> tuple[int, str]: ...
    def register_purpose(self, tenant: str, purpose: str) -> None: ...
    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None: ...


class Origin(Protocol):
    """What the store needs from its source of truth."""

    def transaction(self, kind: str, tenant: str | None, now: float) -> ContextManager[Tx]: ...
    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None: ...
    def resolve(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None,
                now: float) -> dict[int, RecordRow]: ...
    def purposes(self, tenant: str) -> list[str]: ...
    def changes_since(self, epoch: int) -> list[tuple[int, int, str, str]]: ...
    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]: ...
    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]: ...
    def current_epoch(self) -> int: ...
    def receipt(self, handle: str) -> dict[str, Any] | None: ...
    def ledger(self) -> list[dict[str, Any]]: ...
    def meta_get(self, key: str) -> str | None: ...
    def meta_set(self, key: str, value: str) -> None: ...
    def close(self) -> None: ...
