"""mem0's shapes for the facade in :mod:`efface.compat.mem0`: ids, subjects, items, filters."""

from __future__ import annotations

import hashlib
from datetime import date, datetime
from typing import Any

from ..errors import InvalidInput

IDS = ("user_id", "agent_id", "run_id")
PROMOTED = ("user_id", "agent_id", "run_id", "actor_id", "role", "expiration_date")


def _ids(**ids: str | None) -> dict[str, str]:
    out = {}
    for k, v in ids.items():
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip():
            raise InvalidInput(f"{k} must be a non-empty string")
        out[k] = v.strip()
    return out


def _subject(payload: dict[str, Any]) -> str:
    # A user_id is the subject as it is; an agent or run standing in for one is marked, so
    # forgetting user "x" never takes agent "x"'s memories.
    if payload.get("user_id"):
        return str(payload["user_id"])
    k = next(k for k in IDS if payload.get(k))
    return f"{k}:{payload[k]}"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # mem0's content hash, not a security hash


def _expiration(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise InvalidInput("expiration_date must be a date or a string in YYYY-MM-DD format")


def _item(memory_id: str, text: str, payload: dict[str, Any], score: float | None = None) -> dict[str, Any]:
    """mem0's MemoryItem dict: core fields, promoted ids, the rest under ``metadata``."""
    item: dict[str, Any] = {
        "id": memory_id,
        "memory": text,
        "hash": payload.get("hash"),
        "metadata": None,
        "score": score,
        "created_at": payload.get("created_at"),
        "updated_at": payload.get("updated_at"),
    }
    for k in PROMOTED:
        if k in payload:
            item[k] = payload[k]
    extra = {k: v for k, v in payload.items() if k not in (*PROMOTED, "hash", "created_at", "updated_at")}
    if extra:
        item["metadata"] = extra
    return item


LOGICAL = ("AND", "OR", "NOT")
"""mem0's logical filters, each over a list of conditions: every one, any one, none of them."""


def _match(payload: dict[str, Any], filters: dict[str, Any]) -> bool:
    """mem0's filters: ids and metadata keys by equality, ``"*"`` for any value, the
    operators eq, ne, in, nin, gt, gte, lt, lte, contains, icontains, and AND, OR and NOT
    over lists of such filters."""
    meta = {k: v for k, v in payload.items()}
    for k, want in filters.items():
        if k in LOGICAL:
            if not isinstance(want, list) or not want or not all(isinstance(c, dict) for c in want):
                raise InvalidInput(f"filters' {k} needs a non-empty list of conditions (dicts)")
            met = [_match(payload, c) for c in want]
            if not (all(met) if k == "AND" else any(met) if k == "OR" else not any(met)):
                return False
            continue
        have = meta.get(k)
        if want == "*":
            if k not in meta:
                return False
        elif isinstance(want, dict):
            if not all(_op(have, op, arg) for op, arg in want.items()):
                return False
        elif have != want:
            return False
    return True


def _op(have: Any, op: str, arg: Any) -> bool:
    try:
        if op == "eq":
            return bool(have == arg)
        if op == "ne":
            return bool(have != arg)
        if op == "in":
            return have in arg
        if op == "nin":
            return have not in arg
        if op == "contains":
            return isinstance(have, str) and str(arg) in have
        if op == "icontains":
            return isinstance(have, str) and str(arg).lower() in have.lower()
        if op in ("gt", "gte", "lt", "lte"):
            a, b = float(have), float(arg)
            return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    except (TypeError, ValueError):
        return False
    raise InvalidInput("unsupported filter operator: use eq, ne, in, nin, gt, gte, lt, lte, contains, icontains")
