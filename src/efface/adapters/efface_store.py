"""Alias of :mod:`efface.peers.efface_store` (the adapter lives there, beside its audit driver)."""

from ..peers.efface_store import EffaceTool

__all__ = ["EffaceTool"]
