"""The agent-side gate (DESIGN §5): trust no forget you cannot verify, in any store."""

from .protocol import ForgetAck, MemoryTool, ToolHit, VerificationRead

__all__ = ["ForgetAck", "MemoryTool", "ToolHit", "VerificationRead"]
