"""The byte scan's prefilter, compiled: one pass over a chunk's words instead of five.

:meth:`~.fingerprint.Fingerprinter.scan_arrays` hashes every 8-aligned window of every file
in the store and looks the hash's top bits up in a bitmap; only the windows that pass (under
one in a hundred) are mixed and searched for. In numpy that is five passes over each chunk
(two multiplies, an add, a shift, a gather), and the scan ran at 1.1-1.5 GB/s on two cores:
at 1M records, proving an erasure read 2.2 GB and took most of the 3 s from acknowledgement to
``erased``. Compiled by numba into one loop that keeps a word in a register, the same
prefilter runs at 3 GB/s on a core and releases the GIL, so the scan's threads add up
(measured in ``docs/benchmarks.md``).

The loop computes exactly what the numpy passes compute (the same sums, modulo 2**64, and the
same bitmap bits), so a hit found one way is found the other: tests compare both on the same
bytes. numba is a dependency of efface; if it cannot be imported or cannot compile on a
platform, or ``EFFACE_SCAN_KERNEL=numpy`` is set, the scan keeps the numpy passes (and says
why in the log when numba failed). A scan of a small store (under :data:`COMPILE_AT`) keeps
the numpy passes unless the loop is compiled already: they take less time than loading
numba. The compiled code is cached on disk by numba (beside this module, or in numba's user
cache when that is not writable): code only, no data.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import numpy as np

log = logging.getLogger(__name__)

KERNEL_ENV = "EFFACE_SCAN_KERNEL"
"""``numpy`` keeps the scan's numpy passes (a comparison, or a platform numba fails on)."""

COMPILE_AT = 64 << 20
"""Scans of fewer bytes keep the numpy passes unless the loop is compiled already."""

Prefilter = Callable[..., int]
"""``(words, m, ka, kb, shift, bitmap, out_at, out_sum) -> n``: writes the index and the
pre-mix sum of every window among the first ``m`` whose bitmap bit is set, returns how many."""

_lock = threading.Lock()
_kernels: tuple[Prefilter, Prefilter] | None = None
_tried = False


def _compile() -> tuple[Prefilter, Prefilter] | None:
    try:
        import numba
    except Exception as e:  # not installed, or its llvmlite does not load on this platform
        log.warning("the byte scan runs in numpy (numba unavailable: %s)", type(e).__name__)
        return None

    @numba.njit(nogil=True, cache=True)
    def pairs(w, m, ka, kb, sh, bitmap, out_at, out_sum):  # pragma: no cover - compiled, not traced
        n = 0
        for i in range(m):
            u = w[i] * ka + w[i + 1] * kb
            if bitmap[u >> sh]:
                out_at[n] = i
                out_sum[n] = u
                n += 1
        return n

    @numba.njit(nogil=True, cache=True)
    def singles(w, m, ka, kb, sh, bitmap, out_at, out_sum):  # pragma: no cover - compiled, not traced
        n = 0
        for i in range(m):
            u = w[i] * ka
            if bitmap[u >> sh]:
                out_at[n] = i
                out_sum[n] = u
                n += 1
        return n

    try:  # compile (or load from numba's cache) now, on words of every layout a scan passes
        words = np.zeros(4, np.uint64)
        bitmap = np.zeros(2, np.bool_)
        at, sums = np.empty(4, np.int64), np.empty(4, np.uint64)
        k, sh = np.uint64(1), np.uint64(63)
        raw = np.zeros(40, np.uint8)
        raw.flags.writeable = False
        for w in (np.frombuffer(raw.tobytes(), "<u8", 4), np.frombuffer(raw.tobytes(), "<u8", 4, offset=3), words):
            pairs(w, 3, k, k, sh, bitmap, at, sums)
            singles(w, 3, k, k, sh, bitmap, at, sums)
    except Exception as e:  # a numba that imports but cannot compile here: the numpy passes still work
        log.warning("the byte scan runs in numpy (numba could not compile its prefilter: %s)", type(e).__name__)
        return None
    return pairs, singles


def kernels() -> tuple[Prefilter, Prefilter] | None:
    """The compiled prefilters for 16-byte and 8-byte windows, or None for the numpy passes.
    Compiled (or loaded from numba's cache) on first use, once per process."""
    global _kernels, _tried
    if _tried:
        return _kernels
    with _lock:
        if not _tried:
            if os.environ.get(KERNEL_ENV, "").strip().lower() != "numpy":
                _kernels = _compile()
            _tried = True
    return _kernels


def for_scan(nbytes: int) -> tuple[Prefilter, Prefilter] | None:
    """The prefilters a scan of ``nbytes`` uses: the compiled ones once they are there; for a
    scan of at least :data:`COMPILE_AT` bytes, compiled now if need be; else the numpy passes
    (a small store's scan takes milliseconds, less than loading numba)."""
    if _tried or nbytes >= COMPILE_AT:
        return kernels()
    return None


def warm(root: str) -> None:
    """For a store of at least :data:`COMPILE_AT` bytes, compile the prefilters on a
    background thread, so that its first erasure does not wait for numba (about a second:
    numba's import and its cache, more on a machine's first run)."""
    if _tried:
        return
    try:
        size = sum(e.stat().st_size for e in os.scandir(root) if e.is_file())
    except OSError:
        return  # nothing to size yet: the first large scan compiles instead
    if size >= COMPILE_AT:
        threading.Thread(target=kernels, name="efface-scan-compile", daemon=True).start()


def reset() -> None:
    """Forget the choice made (tests, and benchmarks that compare the two): the next scan
    chooses again, reading ``EFFACE_SCAN_KERNEL``."""
    global _kernels, _tried
    with _lock:
        _kernels, _tried = None, False


def run(kernel: Prefilter, w: np.ndarray, m: int, ka: np.uint64, kb: np.uint64, sh: np.uint64, bitmap, at, sums):
    """One chunk through a compiled prefilter: the windows that pass, as (index, sum) arrays
    (views into ``at`` and ``sums``)."""
    n = kernel(w, m, ka, kb, sh, bitmap, at, sums)
    return at[:n], sums[:n]
