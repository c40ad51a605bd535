"""The agent-side gate (docs/concepts.md §5): trust no forget you cannot verify, in any store.

    from efface.gate import Gate, assert_deleted, classify
    gate = Gate(tool, "gate.db")                 # any MemoryTool
    result = gate.forget(scope="acme", keys=["k1"], required_scopes=["support"])
    result.classification.level                  # "intent" or "evidence", with reasons
    gate.recall("tea", scope="acme")             # raises ErasureNotSettled until settled

The errors its functions raise are exported here too (they live in :mod:`efface.errors`):
``ErasureNotSettled`` from ``Gate.recall``, and ``UnverifiableDeletion`` with its kinds
``UnenumeratedScope``, ``CacheRoutedVerification`` and ``UnboundedPropagation`` from
``assert_deleted``.
"""

from ..errors import (
    CacheRoutedVerification,
    ErasureNotSettled,
    UnboundedPropagation,
    UnenumeratedScope,
    UnverifiableDeletion,
)
from .classify import REQUIREMENTS, Check, Classification, assert_deleted, classify
from .gate import POLICIES, ForgetResult, Gate
from .protocol import ForgetAck, MemoryTool, ToolHit, VerificationRead

__all__ = [
    "POLICIES",
    "REQUIREMENTS",
    "CacheRoutedVerification",
    "Check",
    "Classification",
    "ErasureNotSettled",
    "ForgetAck",
    "ForgetResult",
    "Gate",
    "MemoryTool",
    "ToolHit",
    "UnboundedPropagation",
    "UnenumeratedScope",
    "UnverifiableDeletion",
    "VerificationRead",
    "assert_deleted",
    "classify",
]
