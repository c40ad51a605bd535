"""The audit's types: what a run found, per read path and per file, on the evidence ladder.

Nothing here ever holds a target's text, vector, id or subject: only counts, file names and
library versions. The texts and vectors themselves live in :class:`Targets`, which exists
in memory for one run and is never rendered.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

LEVELS = ("intent", "unreadable", "erased")
"""The evidence ladder of docs/concepts.md §3, weakest first."""


def weakest(levels: list[str]) -> str:
    """The lowest rung among ``levels`` (``erased`` when there is none)."""
    return min(levels, key=LEVELS.index) if levels else "erased"


@dataclass(frozen=True)
class Selection:
    """What the audit asks the store to forget: a subject (by a metadata field) or ids."""

    subject: str | None = None
    """Value of ``subject_field`` whose records are forgotten."""
    ids: tuple[str, ...] | None = None
    """Ids to forget (the store's own ids)."""
    subject_field: str = "subject"
    """Metadata / payload / column that names the subject."""

    def __repr__(self) -> str:  # never print the subject or the ids
        n = "-" if self.ids is None else str(len(self.ids))
        return f"Selection(subject={'<set>' if self.subject else None}, ids={n}, field={self.subject_field!r})"


@dataclass(frozen=True, repr=False, eq=False)
class Targets:
    """The records the forget should remove: in memory only, for the length of one run."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    vectors: np.ndarray
    """float32, shape (len(ids), dim); may have 0 rows when the store keeps no vectors."""
    extra: dict = field(default_factory=dict)
    """Driver-specific details it needs for its probes (e.g. efface purposes)."""

    def __repr__(self) -> str:
        return f"Targets({len(self.ids)} records)"


@dataclass(frozen=True)
class ProbeResult:
    """One read path, probed with every target."""

    path: str
    """Read-path name, e.g. ``get by id``, ``nearest neighbours``, ``old versions``."""
    checked: int
    """How many targets were probed through it."""
    returned: int
    """How many targets came back (by id or by text)."""
    detail: str = ""
    """How it was probed, and what came back, in counts."""

    @property
    def level(self) -> str:
        return "intent" if self.returned else "unreadable"


@dataclass(frozen=True)
class FileResidue:
    """Targets whose bytes were found in one file."""

    file: str
    """Path relative to the store's root."""
    size: int
    texts: int
    """Targets whose text was found (whole, or a fragment no other record shares)."""
    texts_whole: int
    """Of those, targets whose whole text was found."""
    vectors: int
    """Targets whose vector was found (a window of it, within float32 rounding)."""
    decoded_by: str = ""
    """Set when the file was also read through its format's decoder (e.g. ``lance``)."""


@dataclass(frozen=True)
class ByteScan:
    """A scan of every file under the store's root."""

    files: tuple[FileResidue, ...]
    """Only the files where something was found."""
    files_scanned: int
    bytes_scanned: int
    texts: int
    """Targets whose text was found in at least one file."""
    vectors: int
    """Targets whose vector was found in at least one file."""

    @property
    def clean(self) -> bool:
        return self.texts == 0 and self.vectors == 0


@dataclass(frozen=True)
class Cell:
    """One row of a stage's verdict table."""

    path: str
    level: str
    evidence: str


@dataclass(frozen=True)
class Stage:
    """The state of the copy after one step: the delete, or a maintenance call."""

    name: str
    """``delete``, ``maintenance`` or an extra stage such as ``sqlite VACUUM (not the store's own)``."""
    calls: tuple[str, ...]
    """The store's calls this stage made, with what they returned (repr, truncated)."""
    seconds: float
    """Wall time of the calls plus closing the store (which flushes it); not the probes or scans."""
    probes: tuple[ProbeResult, ...]
    scan: ByteScan
    cells: tuple[Cell, ...]
    level: str


@dataclass(frozen=True)
class AuditReport:
    """A whole audit: the store, the forget, and the ladder level after each stage."""

    kind: str
    library: str
    """``name version`` of the store's library."""
    collection: str
    targets: int
    """How many records the selection named (and the store held) before the delete."""
    detectable_texts: int
    """Targets whose text the byte scan found before the delete (absence proves nothing for the rest)."""
    detectable_vectors: int
    """Targets whose vector the byte scan found before the delete."""
    delete_returned: str
    """What the store's delete returned, as repr (truncated)."""
    stages: tuple[Stage, ...]
    overall: str
    """The level after the last stage."""
    notes: tuple[str, ...] = ()
    in_place: bool = False
    started_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (counts, names and levels only)."""
        return asdict(self)
