"""Alias of :mod:`efface.peers.mem0` (the adapter lives there, beside its audit driver)."""

from ..peers.mem0 import OFFLINE_LLM_URL, Mem0Tool, close, offline_config, open_offline

__all__ = ["OFFLINE_LLM_URL", "Mem0Tool", "close", "offline_config", "open_offline"]
