"""Alias of :mod:`efface.peers.lancedb` (the adapter lives there, beside its audit driver)."""

from ..peers.lancedb import LanceDBTool

__all__ = ["LanceDBTool"]
