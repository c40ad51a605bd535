"""The one protocol every derived artifact implements (STYLE §2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class Query:
    """A recall as the indexes see it."""

    tenant: str
    text: str
    vector: np.ndarray
    purpose: str
    subject: str | None
    now: float


class DerivedArtifact(Protocol):
    """A structure built from records that must absorb every erasure."""

    name: str
    max_propagation_s: float
    """The bound this artifact declares for absorbing an erasure after it is acknowledged."""
    synchronous: bool
    """True when it absorbs inside the origin's transaction (its applied epoch never lags)."""

    def applied_epoch(self) -> int:
        """The newest epoch whose changes this artifact has fully absorbed."""
        ...

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int],
              texts: dict[int, str]) -> None:
        """Synchronous artifacts: apply a mutation inside the origin transaction."""
        ...

    def catch_up(self, upto: int | None = None) -> int:
        """Asynchronous artifacts: absorb the change log up to ``upto`` (all by default)."""
        ...

    def persist(self) -> None:
        """Make the absorbed state durable, so a restart replays less of the log."""
        ...

    def candidates(self, query: Query, n: int) -> list[int]:
        """Up to ``n`` record ids, best first. The store resolves them against the origin."""
        ...

    def close(self) -> None: ...
