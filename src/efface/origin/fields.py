"""A record's turn fields, for :meth:`efface.origin.base.Reads.turn_fields`.

Every record of a tenant (live or not) as ``(id, speaker, session, at)``: the values of those
metadata fields (None where absent), what recall's turn filters and session windows read
(:mod:`efface.paths.turns`). SQLite reads them with ``json_extract`` in its query; origins
that cannot (the in-memory one, PostgreSQL's sealed metadata) read them here.
"""

from __future__ import annotations

import json
from typing import Any


def turn_fields(rid: int, metadata: str) -> tuple[int, Any, Any, Any]:
    """``(rid, speaker, session, at)`` from a record's metadata JSON."""
    try:
        meta = json.loads(metadata) if metadata else {}
    except ValueError:
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    return rid, meta.get("speaker"), meta.get("session"), meta.get("at")
