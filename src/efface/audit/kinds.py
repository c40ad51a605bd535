"""The kinds of store ``efface audit`` can open, and the one place the audit reaches a peer.

Each kind names a module of :mod:`efface.peers` that holds its driver; the module is imported
only when a driver of that kind is made, so listing the kinds imports no store library.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput

KINDS = ("efface", "chroma", "lancedb", "qdrant", "mem0")


def make(kind: str, collection: str | None = None, **options: Any):
    """The driver for ``kind`` (``efface``, ``chroma``, ``lancedb``, ``qdrant``, ``mem0``)."""
    if kind == "efface":
        from ..peers.efface_store import EffaceDriver

        return EffaceDriver(collection)
    if kind == "chroma":
        from ..peers.chroma import ChromaDriver

        return ChromaDriver(collection)
    if kind == "lancedb":
        from ..peers.lancedb import LanceDBDriver

        return LanceDBDriver(collection, **{k: v for k, v in options.items() if v})
    if kind == "qdrant":
        from ..peers.qdrant import QdrantLocalDriver

        return QdrantLocalDriver(collection, **{k: v for k, v in options.items() if k == "text_field" and v})
    if kind == "mem0":
        from ..peers.mem0 import Mem0Driver

        return Mem0Driver(collection)
    raise InvalidInput(f"unknown store kind: choose one of {', '.join(KINDS)}")
