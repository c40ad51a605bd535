"""The one paged listing both faces need (LangGraph's search without a query, mem0's
``get_all`` and ``history``): every live record under a key prefix, page by page; and the
receipt log every adapter keeps (:func:`receipt_log`)."""

from __future__ import annotations

import collections
from typing import Any

from ..errors import InvalidInput, UnknownPurpose

PAGE = 1000
"""Records per ``Store.scan`` call (its maximum)."""


def scan_all(
    store: Any, *, tenant: str | None, purpose: str | None, prefix: str, subject: str | None = None
) -> list[Any]:
    """Every live record of ``tenant`` for ``purpose`` whose key starts with ``prefix``, in key
    order. A purpose the tenant never wrote under holds nothing: an empty list."""
    out: list[Any] = []
    after = None
    while True:
        try:
            page = store.scan(tenant=tenant, purpose=purpose, prefix=prefix, subject=subject, after=after, limit=PAGE)
        except UnknownPurpose:
            return []
        out.extend(page)
        if len(page) < PAGE:
            return out
        after = page[-1].key


def receipt_log(keep_receipts: Any) -> collections.deque:
    """The deque an adapter keeps its receipts in, at most ``keep_receipts`` of them (None: no
    limit). A negative or non-whole number is an :class:`InvalidInput` (``deque`` raised a raw
    ValueError or TypeError from the adapter's constructor)."""
    if keep_receipts is not None and (
        isinstance(keep_receipts, bool) or not isinstance(keep_receipts, int) or keep_receipts < 0
    ):
        raise InvalidInput("keep_receipts must be a whole number, 0 or more (or None for no limit)")
    return collections.deque(maxlen=keep_receipts)
