"""The SQLite origin's row vocabulary: the columns a read selects, the live and quarantine
predicates every read and transaction shares, rows as the origin's types, and ``IN (...)`` chunks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..base import ClaimRow, RecordRow


def claim_row(row: tuple) -> ClaimRow:
    return ClaimRow(*row)


def record_row(row: tuple) -> RecordRow:
    return RecordRow(*row)


REC_COLS = "r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.updated_at"
CLAIM_COLS = "c.id, c.record_id, r.key, c.subject, c.purpose, c.basis, c.expires_at"
LIVE = "(c.expires_at IS NULL OR c.expires_at > ?)"
NOT_QUARANTINED = "NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.record_id=r.id)"


def in_chunks(values: Sequence[Any], size: int = 500) -> Iterator[tuple[list[Any], str]]:
    """``values`` in chunks small enough for one ``IN (...)``, each with its placeholders."""
    for start in range(0, len(values), size):
        chunk = list(values[start : start + size])
        yield chunk, ",".join("?" * len(chunk))
