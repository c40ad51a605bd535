"""What recall knows of conversation turns: when a record was said, by whom, in which session.

Three metadata fields are reserved (:data:`efface.validate.TURN_FIELDS`) and checked at write:
``at`` (when: unix seconds, an ISO 8601 date or time, or a ``datetime``; a time without a
zone is UTC), ``speaker`` and ``session`` (non-empty strings). They are metadata like any
other: stored with the record, returned with it, fingerprinted and erased with it.

A recall can be narrowed by them (:class:`Where`: ``after``, ``before``, ``said_by``): a
record that does not match is, for that recall, as if it had no live claim. The narrowing is
applied where liveness is checked (``efface.paths.candidates._Checks``), so every path's
candidates are checked against it before fusion and the top-``k`` cut, and recall widens its
candidate lists while too few survive, as it does for purpose and subject; when the
candidates still hold fewer than ``k`` that match, every matching record of the tenant is
judged (:func:`eligible`). The records that match are found from the tenant's turn fields,
read in the recall's own snapshot (:meth:`efface.origin.base.Reads.turn_fields`: on SQLite by
``json_extract`` in the query): a pass over the tenant's records, opt-in with the filter.

A recall can also widen each hit to its session (``window=n``): the ``n`` turns before and
after it in the same ``session``, ordered by ``at`` (then by when they were written),
each of them live for the recall's tenant, purpose (and subject) and matching its filters,
read in the same snapshot as the hits (:func:`windows`). A hit without a ``session`` has
no window.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def seconds(value: Any) -> float | None:
    """``at`` as unix seconds: a number, an ISO 8601 string, or a ``datetime`` (naive: UTC);
    None for anything else (a value validation would have refused)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            got = float(value)
        except OverflowError:  # an int beyond any float
            return None
        return got if math.isfinite(got) else None
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        try:
            return value.timestamp()
        except (OverflowError, OSError, ValueError):
            return None
    return None


@dataclass(frozen=True)
class Where:
    """What a recall is narrowed to: turns said at or after ``after``, before ``before``
    (unix seconds), by ``said_by`` (the ``speaker`` field, exactly)."""

    after: float | None = None
    before: float | None = None
    said_by: str | None = None

    def lets(self, speaker: Any, at: Any) -> bool:
        """Whether a turn said by ``speaker`` at ``at`` (its metadata's values) passes."""
        if self.said_by is not None and speaker != self.said_by:
            return False
        if self.after is not None or self.before is not None:
            when = seconds(at)
            if when is None:
                return False
            if self.after is not None and when < self.after:
                return False
            if self.before is not None and when >= self.before:
                return False
        return True

    def matches(self, metadata: str) -> bool:
        """Whether a record with this metadata (JSON, as stored) passes."""
        meta = _meta(metadata)
        return self.lets(meta.get("speaker"), meta.get("at"))


def _meta(raw: str) -> dict[str, Any]:
    try:
        got = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


Fields = list[tuple[int, Any, Any, Any]]
"""A tenant's records as ``(id, speaker, session, at)``: :meth:`efface.origin.base.Reads.turn_fields`."""


def eligible(fields: Fields, where: Where) -> frozenset[int]:
    """The ids of the records (live or not: liveness is checked apart) that ``where`` lets through."""
    lets = where.lets
    return frozenset(rid for rid, speaker, _, at in fields if lets(speaker, at))


def windows(fields: Fields, hits: dict[int, str], n: int, live: Any) -> dict[int, list[int]]:
    """For each hit (id -> its metadata as stored): the ids of the ``n`` turns before and
    after it in its session that ``live(ids)`` (the recall's own check: claims, purpose,
    subject, filters) lets through, in session order; the hit itself is not among them."""
    if n <= 0 or not hits:
        return {}
    sessions = {rid: _meta(raw).get("session") for rid, raw in hits.items()}
    wanted = {s for s in sessions.values() if isinstance(s, str)}
    if not wanted:
        return {}
    members: dict[str, list[tuple[float, int]]] = {s: [] for s in wanted}
    for rid, _, s, at in fields:
        if s in members:
            when = seconds(at)
            members[s].append((math.inf if when is None else when, rid))
    allowed = set(live([rid for ms in members.values() for _, rid in ms]))
    out: dict[int, list[int]] = {}
    for rid, s in sessions.items():
        if not isinstance(s, str):
            continue
        order = [r for _, r in sorted(members[s]) if r in allowed or r == rid]
        if rid not in order:
            continue
        i = order.index(rid)
        out[rid] = order[max(0, i - n) : i] + order[i + 1 : i + 1 + n]
    return out


def flat(groups: Iterable[list[int]]) -> list[int]:
    return list(dict.fromkeys(r for g in groups for r in g))
