"""The per-kind driver protocol: how the audit opens, reads, deletes from and maintains a store.

A driver works on a directory it is given (the audit's copy, or the original with
``--in-place``) and uses only the store's own library. Two optional methods:
``notes()`` (facts about the platform the verdict depends on) and ``extra_maintenance()``
(``(stage name, step)`` pairs for deeper calls than the store's usual maintenance). It never writes what it reads
anywhere: texts and vectors go into :class:`~efface.audit.model.Targets`, in memory.

The drivers themselves live with their store in :mod:`efface.peers` (one module per store,
beside its gate adapter); :class:`BaseDriver` gives them the defaults of the optional parts.
This module imports nothing from them.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ..errors import EffaceError, InvalidInput
from .model import ProbeResult, Selection, Targets
from .scan import Decoder

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One call the driver made to the store, and what it returned."""

    name: str
    returned: Any


class Driver(Protocol):
    """What the audit needs from one kind of store."""

    kind: str
    collection: str

    def library(self) -> str:
        """``name version`` of the library that reads and writes the store."""

    def open(self, root: Path) -> None:
        """Open the store at ``root`` (the copy)."""

    def close(self) -> None:
        """Release the store, so its files are flushed and can be scanned or maintained."""

    def targets(self, selection: Selection) -> Targets:
        """The records the selection names, with their texts and vectors (raise if none)."""

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray | None]:
        """Texts and vectors of every other record (they make fingerprints specific); None
        for the vectors when the store keeps none."""

    def delete(self, selection: Selection, targets: Targets) -> Call:
        """Run the store's own delete for the selection."""

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        """Probe every read path the store exposes with every target."""

    def maintenance(self, root: Path) -> list[Call]:
        """Run the store's own maintenance calls (the store is closed; reopen if needed)."""

    def decoders(self) -> Sequence[Decoder]:
        """Decoded views of files whose format hides bytes from a raw scan."""


class BaseDriver:
    """Defaults for the parts of :class:`Driver` a store may not have: no maintenance call
    of its own, no decoded views, no platform notes, no extra maintenance stages."""

    kind: str
    collection: str

    def maintenance(self, root: Path) -> list[Call]:
        return []

    def decoders(self) -> Sequence[Decoder]:
        return ()

    def notes(self) -> list[str]:
        return []

    def extra_maintenance(self) -> list:
        return []

    def _opened(self, handle: T | None) -> T:
        """``handle`` (the client, table or store :meth:`open` set), or a clear error when the
        driver is used before ``open`` or after ``close``."""
        if handle is None:
            raise EffaceError(f"the {self.kind} driver is not open: call open(root) first")
        return handle


def version(dist: str) -> str:
    """``dist version``, or ``dist (not installed)``."""
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{dist} (not installed)"


def count_returned(targets: Targets, ids: Iterable[Any], texts: Iterable[Any] = ()) -> int:
    """How many targets came back, recognised by id or by exact text."""
    by_id = {str(i): n for n, i in enumerate(targets.ids)}
    by_text = {t: n for n, t in enumerate(targets.texts) if t}
    hit: set[int] = set()
    for i in ids:
        if str(i) in by_id:
            hit.add(by_id[str(i)])
    for t in texts:
        if isinstance(t, str) and t in by_text:
            hit.add(by_text[t])
    return len(hit)


def no_targets() -> InvalidInput:
    return InvalidInput(
        "the selection names no record in this store: check the subject (and --subject-field), the ids, or --collection"
    )
