"""The byte scan's prefilter as loops numba compiles: one pass over a chunk's words, not five.

:meth:`~.fingerprint.Fingerprinter.scan_arrays` hashes every 8-aligned window of every file
in the store and looks the hash's top bits up in a bitmap; only the windows that pass (under
one in a hundred) are mixed and searched for. In numpy that is five passes over each chunk
(two multiplies, an add, a shift, a gather): the scan ran at 1.1-1.5 GB/s on two cores, and at
1M records proving an erasure read 2.2 GB. Compiled (:mod:`efface.compiled`), the same
prefilter keeps a word in a register, runs at about 3 GB/s on a core and releases the GIL, so
the scan's threads add up (``docs/benchmarks-history.md``).

The loops compute exactly what the numpy passes compute (the same sums, modulo 2**64, and the
same bitmap bits), so a hit found one way is found the other: tests compare both on the same
bytes (``tests/test_scan_prefilter.py``).
"""

from __future__ import annotations

import numpy as np

from .. import compiled


def _warm(f) -> None:
    """Every layout a scan passes: read-only words (a mapped file or a copied WAL), at an odd
    offset (the unaligned pass), and writable ones."""
    raw = np.zeros(40, np.uint8).tobytes()
    bitmap = np.zeros(2, np.bool_)
    at, sums = np.empty(4, np.int64), np.empty(4, np.uint64)
    k, sh = np.uint64(1), np.uint64(63)
    for w in (np.frombuffer(raw, "<u8", 4), np.frombuffer(raw, "<u8", 4, offset=3), np.zeros(4, np.uint64)):
        f(w, 3, k, k, sh, bitmap, at, sums)


@compiled.loop(_warm)
def pairs(w, m, ka, kb, sh, bitmap, out_at, out_sum):  # pragma: no cover - run compiled, not traced
    """16-byte windows: writes the index and the keyed sum ``w[i]*ka + w[i+1]*kb`` of every
    window among the first ``m`` whose bitmap bit (the sum's top bits) is set; returns how many."""
    n = 0
    for i in range(m):
        u = w[i] * ka + w[i + 1] * kb
        if bitmap[u >> sh]:
            out_at[n] = i
            out_sum[n] = u
            n += 1
    return n


@compiled.loop(_warm)
def singles(w, m, ka, kb, sh, bitmap, out_at, out_sum):  # pragma: no cover - run compiled, not traced
    """8-byte windows: as :func:`pairs` with the sum ``w[i]*ka`` (``kb`` unused)."""
    n = 0
    for i in range(m):
        u = w[i] * ka
        if bitmap[u >> sh]:
            out_at[n] = i
            out_sum[n] = u
            n += 1
    return n


def run(width: int, w: np.ndarray, m: int, ka, kb, sh, bitmap: np.ndarray, at: np.ndarray, sums: np.ndarray):
    """One chunk through the compiled prefilter for ``width``-byte windows: the windows that
    pass, as (index, sum) arrays (views into ``at`` and ``sums``)."""
    f = (pairs if width == 16 else singles).compiled
    assert f is not None, "run only once compiled.on()"
    n = f(w, m, ka, kb, sh, bitmap, at, sums)
    return at[:n], sums[:n]
