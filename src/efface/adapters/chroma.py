"""Alias of :mod:`efface.peers.chroma` (the adapter lives there, beside its audit driver)."""

from ..peers.chroma import ChromaTool

__all__ = ["ChromaTool"]
