"""The kinds of store ``efface audit`` can open: a registry of drivers by name.

Each kind names the class of its driver as ``module:Class`` (how plugin entry points name
theirs), resolved only when a driver of that kind is made. So the audit knows the peers by
name and never imports their code (imports run one way: :mod:`efface.peers` builds on
:mod:`efface.audit`), and listing the kinds imports no store library.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import InvalidInput

DRIVERS = {
    "efface": "efface.peers.efface_store:EffaceDriver",
    "chroma": "efface.peers.chroma:ChromaDriver",
    "lancedb": "efface.peers.lancedb:LanceDBDriver",
    "qdrant": "efface.peers.qdrant:QdrantLocalDriver",
    "mem0": "efface.peers.mem0:Mem0Driver",
}
KINDS = tuple(DRIVERS)
OPTIONS = {"lancedb": ("id_field", "text_field", "vector_field"), "qdrant": ("text_field",)}
"""The driver options each kind takes (the others are ignored)."""


def driver_class(kind: str) -> Any:
    """The driver class registered for ``kind``."""
    if kind not in DRIVERS:
        raise InvalidInput(f"unknown store kind: choose one of {', '.join(KINDS)}")
    module, _, name = DRIVERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def make(kind: str, collection: str | None = None, **options: Any):
    """The driver for ``kind`` (``efface``, ``chroma``, ``lancedb``, ``qdrant``, ``mem0``)."""
    cls = driver_class(kind)
    wanted = {k: v for k, v in options.items() if v and k in OPTIONS.get(kind, ())}
    return cls(collection, **wanted)
