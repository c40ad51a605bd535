"""The one paged listing both faces need (LangGraph's search without a query, mem0's
``get_all`` and ``history``): every live record under a key prefix, page by page."""

from __future__ import annotations

from typing import Any

from ..errors import UnknownPurpose

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
