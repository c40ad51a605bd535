"""The seam between an agent and any memory tool: what the gate needs to see.

A memory tool is anything with ``write``, ``recall`` and ``forget``. What it *may* also
offer is what turns a forget acknowledgement from intent into evidence (docs/concepts.md §5):

- ``read_epoch(scope)``: the erasure epoch its reads in ``scope`` reflect now;
- an erasure epoch or a verification handle in the acknowledgement;
- ``verification_read(keys, scope)``: a read of those keys routed to the origin,
  bypassing caches and replicas, that reports where it was served from;
- ``max_propagation_s``: a declared bound on how long its derived structures lag;
- ``derived_structures``: the derived structures (indexes, caches, summaries) its
  forget covers.

Adapters (``efface.adapters``) present real stores through this protocol and fill an
acknowledgement only with what the store really returned or guarantees: never more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolHit:
    """One recall result from a memory tool."""

    key: str
    text: str
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerificationRead:
    """The outcome of a read made to check a forget."""

    routed_to: str
    """Where it was served from: ``origin``, ``cache``, ``replica`` or ``unknown``."""
    found: tuple[str, ...]
    """Keys that still came back (empty when the erasure holds on this read)."""
    checked_at: float
    """Unix time of the read."""


@dataclass(frozen=True)
class ForgetAck:
    """A forget acknowledgement as a tool gave it, plus what the tool guarantees.

    Every optional field is None when the tool did not say: the gate never fills a gap
    with a guess."""

    raw: Any
    """What the tool returned, verbatim (a bool, a dict, a message, a receipt ...)."""
    scope: str
    """The scope (tenant, namespace, collection ...) the forget ran in."""
    keys: tuple[str, ...] = ()
    """Keys the forget targeted, when known."""
    acknowledged_at: float = 0.0
    """Unix time the acknowledgement was received."""
    handle: str | None = None
    """A verification handle the tool can check later."""
    epoch: int | None = None
    """The erasure epoch the tool assigned to this forget."""
    scopes_cleared: tuple[str, ...] | None = None
    """Every retention scope the forget enumerated and cleared (None: not enumerated)."""
    derived_covered: tuple[str, ...] | None = None
    """Derived structures the forget covers (None: not said)."""
    max_propagation_s: float | None = None
    """Declared bound on propagation to every derived structure (None: unbounded)."""
    verification: VerificationRead | None = None
    """A verification read made after the forget, if any."""
    scopes_retained: tuple[str, ...] | None = None
    """Retention scopes the forget enumerated and left in force (a legal hold, another
    live claim): named, so not hidden, but not cleared either."""


@runtime_checkable
class MemoryTool(Protocol):
    """The three operations every memory tool has. Optional capabilities are plain
    attributes or methods looked up with ``getattr``; see the module docstring."""

    name: str

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None: ...

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]: ...

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck: ...
