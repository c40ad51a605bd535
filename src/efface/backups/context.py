"""What backup and restore are handed by the store (they never import it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..origin.base import Origin, Tx

Body = Callable[[Tx, float], tuple[Any, list[int], list[int], dict[int, str]]]


@dataclass(frozen=True)
class BackupContext:
    origin: Origin
    mutate: Callable[..., tuple[int, Any]]
    """The store's chokepoint: ``mutate(kind, tenant, body, after=...)``."""
    hasher: Callable[..., str]
    secret: Callable[[str], bytes]
    """A key derived from the store's secret for a label (``backup-mac``, ``backup-settings``)."""
    embedder_name: str
    derivations: Any
    expire_due: Callable[[], object]
