"""Alias of :mod:`efface.peers.qdrant` (the adapter lives there, beside its audit driver)."""

from ..peers.qdrant import QdrantTool, point_id

__all__ = ["QdrantTool", "point_id"]
