"""What a byte scan found, as arrays: :class:`Hits` (one entry per hit, so a verifier judges
most of them without a Python step each) and :class:`Hit`, one of them as an object. The
scanner that makes them is :class:`efface.erasure.fingerprint.Fingerprinter`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Hits:
    """The hits of a scan as arrays (one entry per hit), so that a verifier can judge most of
    them without a Python step each: a scan of a big store meets a window shared with live
    records once per live record."""

    files: list[str]
    """The scanned files' names (``file`` indexes them)."""
    kinds: list[str]
    """The item kinds (``kind`` indexes them)."""
    file: np.ndarray
    offset: np.ndarray
    width: np.ndarray
    kind: np.ndarray
    hash: np.ndarray

    def __len__(self) -> int:
        return int(self.offset.size)

    def take(self, mask: np.ndarray) -> Hits:
        return Hits(
            self.files,
            self.kinds,
            self.file[mask],
            self.offset[mask],
            self.width[mask],
            self.kind[mask],
            self.hash[mask],
        )

    def objects(self) -> list[Hit]:
        files, kinds = self.files, self.kinds
        return [
            Hit(files[f], o, w, kinds[k], h)
            for f, o, w, k, h in zip(
                self.file.tolist(),
                self.offset.tolist(),
                self.width.tolist(),
                self.kind.tolist(),
                self.hash.tolist(),
                strict=True,
            )
        ]


@dataclass(frozen=True)
class Hit:
    """A fingerprint met in a file: where, and which kind of item it came from."""

    file: str
    offset: int
    width: int
    kind: str
    hash: int = 0
    """The window's hash (to find its sites)."""
