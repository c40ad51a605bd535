"""How a record's vector is kept in the origin: unit length, IEEE half precision.

A record row is mostly its vector: at 384 dimensions, float32 is 1,536 of a row's ~1,700
bytes, so the origin, and every byte scan that proves an erasure, was mostly vectors (half
precision took 28 % off ``origin.db`` at 1M records, docs/benchmarks-history.md). Half precision
keeps 11 significant bits: a unit vector's cosine to a query moves by about 1e-4, well under
what separates two candidates (the ANN index holds the vectors as i8 anyway;
docs/benchmarks-history.md measures recall on both forms). Vectors are normalised before they are
stored, so a caller's precomputed embedding of any length is compared by its direction, as
the ANN index compares it.

A stored vector is one tag byte, :data:`F16`, then the components as little-endian float16:
its length is odd, while a store written before this format holds plain float32 rows
(length a multiple of 4) that are still read as they are. No length is ambiguous, so a
blob says how to read it without the store's dimension.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import compiled

F16 = b"\x10"
"""The tag that starts a half-precision vector (a float32 row's length is a multiple of 4;
this form's is odd)."""
_HALF = np.dtype("<f2")


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` (rows of float32) scaled to unit length; a zero row stays zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def stored(rows: np.ndarray) -> list[bytes]:
    """The stored form of each row of ``rows`` (finite floats, one vector per row)."""
    half = np.ascontiguousarray(unit_rows(np.asarray(rows, dtype=np.float32)), dtype=_HALF)
    return [F16 + row.tobytes() for row in half]


def stored_one(vector: np.ndarray) -> bytes:
    """The stored form of one vector."""
    return stored(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]


_SCALE = np.float32(2.0**112)
"""A half's exponent bias is 15, a float's 127: a half's bits moved into a float's place read
as the half's value times 2**-112."""


WIDEN_MAX = 1 << 18
"""Past this many values numpy's own conversion is used: the passes below make temporaries
four times the input's size, and once they outgrow the caches they cost more than they save
(10,000 vectors of 384: 27 ms against numpy's 11)."""


def widen(half: np.ndarray) -> np.ndarray:
    """Half-precision values as float32, exactly as ``astype(np.float32)`` gives them
    (subnormals and signed zeros included; no infinities or NaNs, which a unit vector never
    holds), by moving each half's bits into a float's place: numpy converts halves one at a
    time, 200 vectors of 384 in 0.2 ms. In one compiled pass (:func:`_moved`, once
    :mod:`efface.compiled` has compiled its loops) that takes 0.03 ms, in a few integer passes
    of numpy 0.08-0.1 ms; large arrays go to numpy's conversion when not compiled
    (:data:`WIDEN_MAX`)."""
    half = np.asarray(half, dtype=_HALF)
    loop = _moved.compiled if compiled.ready() else None
    if loop is not None:
        bits = np.ascontiguousarray(half).view(np.uint16).reshape(-1)
        out = np.empty(bits.size, dtype=np.uint32)
        loop(bits, out)
        wide = out.view(np.float32)
        wide *= _SCALE
        return wide.reshape(half.shape)
    if half.size > WIDEN_MAX:
        return half.astype(np.float32)
    bits = half.view(np.uint16).astype(np.uint32)
    moved = ((bits & 0x7FFF) << 13) | ((bits & 0x8000) << 16)
    return moved.view(np.float32) * _SCALE


def _warm(f) -> None:
    """The one layout :func:`widen` passes."""
    f(np.zeros(4, np.uint16), np.empty(4, np.uint32))


@compiled.loop(_warm)
def _moved(bits, out):  # pragma: no cover - run compiled, not traced
    """Each half's sign, exponent and fraction moved to where a float32 keeps them (the
    value times 2**-112, which :func:`widen` scales back)."""
    for i in range(bits.size):
        b = np.uint32(bits[i])
        out[i] = ((b & np.uint32(0x7FFF)) << np.uint32(13)) | ((b & np.uint32(0x8000)) << np.uint32(16))


def read(blob: bytes) -> np.ndarray:
    """A stored vector as float32: half precision after the tag, or a float32 row."""
    if len(blob) % 2 == 1 and blob[:1] == F16:
        return np.frombuffer(blob, dtype=_HALF, offset=1).astype(np.float32)
    return np.frombuffer(blob, dtype=np.float32)


def read_many(blobs: Sequence[bytes]) -> np.ndarray:
    """Stored vectors of one length, as rows of float32 (one array operation per form)."""
    if not blobs:
        return np.empty((0, 0), dtype=np.float32)
    size = len(blobs[0])
    if all(len(b) == size for b in blobs):
        if size % 2 == 1 and all(b[:1] == F16 for b in blobs):
            raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), size)[:, 1:]
            return widen(np.ascontiguousarray(raw).view(_HALF))
        if size % 4 == 0:
            return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), size // 4)
    return np.vstack([read(b) for b in blobs])
