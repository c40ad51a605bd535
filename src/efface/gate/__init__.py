"""The agent-side gate (DESIGN §5): trust no forget you cannot verify, in any store.

    from efface.gate import Gate, assert_deleted, classify
    gate = Gate(tool, "gate.db")                 # any MemoryTool
    result = gate.forget(scope="acme", keys=["k1"], required_scopes=["support"])
    result.classification.level                  # "intent" or "evidence", with reasons
    gate.recall("tea", scope="acme")             # raises ErasureNotSettled until settled
"""

from .classify import REQUIREMENTS, Check, Classification, assert_deleted, classify
from .gate import POLICIES, ForgetResult, Gate
from .protocol import ForgetAck, MemoryTool, ToolHit, VerificationRead

__all__ = [
    "Check",
    "Classification",
    "ForgetAck",
    "ForgetResult",
    "Gate",
    "MemoryTool",
    "POLICIES",
    "REQUIREMENTS",
    "ToolHit",
    "VerificationRead",
    "assert_deleted",
    "classify",
]
