"""One driver per kind of store the audit can open (see :mod:`.base` for the protocol)."""

from __future__ import annotations

from ...errors import InvalidInput


def make(kind: str, collection: str | None = None, **options):
    """The driver for ``kind`` (``efface``, ``chroma``, ``lancedb``, ``qdrant``, ``mem0``)."""
    if kind == "efface":
        from .efface_store import EffaceDriver

        return EffaceDriver(collection)
    if kind == "chroma":
        from .chroma import ChromaDriver

        return ChromaDriver(collection)
    if kind == "lancedb":
        from .lancedb import LanceDBDriver

        return LanceDBDriver(collection, **{k: v for k, v in options.items() if v})
    if kind == "qdrant":
        from .qdrant import QdrantLocalDriver

        return QdrantLocalDriver(collection, **{k: v for k, v in options.items() if k == "text_field" and v})
    if kind == "mem0":
        from .mem0 import Mem0Driver

        return Mem0Driver(collection)
    raise InvalidInput(f"unknown store kind: choose one of {', '.join(KINDS)}")


KINDS = ("efface", "chroma", "lancedb", "qdrant", "mem0")
