"""Helpers the peer modules share (not part of the public API)."""

from __future__ import annotations

import importlib
import time
from typing import Any

from ..errors import InvalidInput


def need(module: str, extra: str, *, for_audit: bool = False) -> Any:
    """Import an optional store library, or say which extra installs it (in the words of
    the adapter, or of ``efface audit`` when ``for_audit``)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if for_audit:
            raise InvalidInput(f"this store kind needs the '{module}' library: pip install 'efface[{extra}]'") from None
        raise InvalidInput(f"this adapter needs '{module}': pip install 'efface[{extra}]'") from None


def embedder(spec: Any):
    """An efface embedder (default: hashing, which needs no model): the adapters hand every
    store its vectors, so no store ever loads or downloads a model of its own."""
    from ..embed import resolve

    return resolve(spec or "hashing", None)


def now() -> float:
    return time.time()


def check_selector(subject: str | None, keys: Any) -> None:
    if subject is None and not keys:
        raise InvalidInput("forget needs a subject or at least one key")
