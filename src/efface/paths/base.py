"""The one protocol every derived read path implements, with the erasure contract in it.

A read path is any structure built from records that can put content in front of a reader:
the ANN index, the full-text index, later a cache or an archive. Each one declares its
propagation bound, reports the epoch it has absorbed and the epoch whose bytes are gone from
its files, proposes candidates (which the store resolves in the origin before any text
leaves), keeps at forget time the evidence a later verification needs, and answers that
verification with a probe (``unreadable``) and a structural check (``erased``). The store,
the compactor and the verifier loop over the list of paths: a new path is one new module.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..model import Check

if TYPE_CHECKING:
    from ..ranking import Ranking
    from .turns import Where


@dataclass(frozen=True)
class Query:
    """A recall as the indexes see it."""

    tenant: str
    text: str
    vector: np.ndarray
    purpose: str
    subject: str | None
    now: float
    where: Where | None = None
    """What the recall is narrowed to besides purpose and subject (:mod:`efface.paths.turns`)."""


@dataclass(frozen=True)
class Erased:
    """What a forget erased, as a read path sees it at forget time (inside the transaction)."""

    tenant: str
    ids: tuple[int, ...]
    """The erased record ids (never reused)."""
    texts: dict[int, str]
    vectors: dict[int, np.ndarray]
    sample: tuple[int, ...]
    """The erased ids whose evidence is kept for probes (a sample bounds the forget's cost)."""


@dataclass(frozen=True)
class Held:
    """Bytes a read path holds for erased records, to fingerprint (``kind``, items, region)."""

    kind: str
    items: list[bytes]
    region: int


class ReadPath(Protocol):
    """A derived artifact that must absorb every erasure (docs/concepts.md §4, invariants 3 and 5)."""

    name: str
    max_propagation_s: float
    """The bound this path declares for absorbing an erasure after it is acknowledged."""
    synchronous: bool
    """True when it absorbs inside the origin's transaction (its applied epoch never lags)."""

    def applied_epoch(self) -> int:
        """The newest epoch whose changes this path has fully absorbed (reads cannot see them)."""
        ...

    def erased_epoch(self) -> int:
        """The newest epoch whose erased bytes are physically gone from this path's files."""
        ...

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        """Synchronous paths: apply a mutation inside the origin transaction."""
        ...

    def catch_up(self, upto: int | None = None) -> int:
        """Asynchronous paths: absorb the change log up to ``upto`` (all by default)."""
        ...

    def persist(self) -> None:
        """Make the absorbed state durable, erasing the bytes of absorbed erasures."""
        ...

    def erase(self) -> None:
        """Asynchronous paths: erase the bytes of absorbed erasures from the files, without
        making the rest of the absorbed state durable where that is cheaper (else persist)."""
        ...

    def replay_epoch(self) -> int:
        """Asynchronous paths: the change log must be kept past this epoch (what a reopen
        absorbs again on top of the saved files)."""
        ...

    def candidates(self, query: Query, n: int) -> list[int]:
        """Up to ``n`` record ids, best first. The store resolves them against the origin."""
        ...

    def held(self, erased: Erased) -> list[Held]:
        """The bytes this path holds for the erased records, in its own form (fingerprinted)."""
        ...

    def evidence(self, erased: Erased) -> bytes:
        """What a later probe of this path needs, without the content (kept in the origin)."""
        ...

    def probe(self, tenant: str | None, erased: Sequence[int], evidence: bytes) -> Check | None:
        """The ``unreadable`` check: can this path still lead a read to an erased record?"""
        ...

    def check_erased(self, tenant: str | None, epoch: int, erased: Sequence[int]) -> Check:
        """The ``erased`` structural check: absorbed, saved and purged past ``epoch``."""
        ...

    def live_copies(self, tenant: str | None, windows: Sequence[bytes]) -> set[bytes]:
        """Which of these byte windows a live record legitimately holds in this path."""
        ...

    def may_hold_live(self, file: str) -> bool:
        """Whether ``file`` (relative to the store directory) holds this path's live content."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class VectorSearch(Protocol):
    """A read path that searches by vector (the ANN index): recall judges each of its live
    candidates by exact cosine over the union, and widens its list until ``k`` survive."""

    def size(self, tenant: str) -> int:
        """About how many vectors it searches for the tenant (a bound on widening)."""
        ...


@runtime_checkable
class LiveVectorSearch(Protocol):
    """A vector path whose search checks its candidates live itself, in the recall's snapshot
    (an origin's own vector index, filtered in the same statement), and reads their vectors
    with them: recall takes them as checked, without looking them up again."""

    name: str

    def live_candidates(self, query: Query, n: int) -> dict[int, bytes]:
        """Up to ``n`` records live for the query, best first, each with its stored vector."""
        ...

    def live_scored(
        self, query: Query, n: int, also: Sequence[int], ahead: Sequence[int] = ()
    ) -> tuple[dict[int, float | None], dict[int, float | None]]:
        """:meth:`live_candidates` with each record's cosine to the query instead of its
        vector (None: it has none), and which of ``also`` (other legs' candidates, not yet
        checked) are live, with theirs: both in one look-up in the recall's snapshot.
        ``ahead``: those of ``also`` recall expects to return, whose rows the origin may
        read in the same look-up for the snapshot's closing read (:class:`ClosingRead`)."""
        ...


@runtime_checkable
class Scoring(Protocol):
    """A read path that scores its own matches and checks them live in its own query (full
    text): recall fuses its scores as a share of the query's best possible score."""

    name: str

    def scored(self, query: Query, n: int) -> list[tuple[int, float]]:
        """The ``n`` best live matches with their scores, best first."""
        ...

    def scored_within(self, query: Query, n: int) -> tuple[list[tuple[int, float]], float]:
        """:meth:`scored`, and the most any record could score for the query."""
        ...

    def ranked_within(self, query: Query) -> tuple[Ranking, float] | None:
        """Every match best first, not checked live, and that ceiling; None where it cannot."""
        ...


@runtime_checkable
class Seeing(Protocol):
    """An asynchronous path that can search what it has not absorbed yet (its delta), so a
    recall makes new writes findable without waiting for the absorption."""

    def see(self, upto: int | None) -> None: ...
    def seen_epoch(self) -> int: ...


def check(name: str, rung: str, outcome: str, detail: str, at: float, duration: float | None = None) -> Check:
    """A recorded check, timed from ``at`` (now, unless ``duration`` is given)."""
    took = time.time() - at if duration is None else duration
    return Check(name=name, rung=rung, outcome=outcome, detail=detail, at=round(at, 6), duration_s=round(took, 6))
