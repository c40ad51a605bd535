"""Loops compiled by numba, for the few places where numpy passes over an array many times.

Proving an erasure reads every byte of the store once (docs/concepts.md §3: ``erased`` is checked by
scanning the bytes) and then judges every place a fingerprint matched (a window shared with
every live record is met once per record: a million places at a million records). In numpy
each step is several passes over large arrays; a loop that keeps a value in a register does
it in one. The loops are written here as plain Python functions beside the code they belong
to (:mod:`efface.erasure.prefilter`, :mod:`efface.origin.sqlite.physical`) and registered with
:func:`loop`; numba compiles them with the GIL released, so the scan's threads add up.
Recall has two: the half-precision vectors it scores widened to float32 in one pass
(:mod:`efface.vectors`), and each query word's postings walked against the candidates the
words found (:mod:`efface.origin.sqlite.postings`), which at a million records took a binary
search per candidate through a common word's list of hundreds of thousands; the word leg
runs them on its worker thread without the GIL, beside the ANN search.

Every caller keeps its numpy version, which is what runs when the loops are not compiled:
numba missing or failing on a platform (a warning says why), ``EFFACE_SCAN_KERNEL=numpy``, or
a small store (a scan of less than :data:`COMPILE_AT` bytes takes less time than loading
numba, about a second; recall never waits for the compile, and uses the loops once they are
ready). Tests run both and compare them. numba caches the compiled code on
disk (beside the module, or in its user cache when that is not writable): code only, no data.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

KERNEL_ENV = "EFFACE_SCAN_KERNEL"
"""``numpy`` keeps the numpy versions (a comparison, or a platform numba fails on)."""
COMPILE_AT = 64 << 20
"""Scans of fewer bytes keep the numpy versions unless the loops are compiled already."""

_lock = threading.Lock()
_loops: list[Loop] = []
_on: bool | None = None
"""None until chosen; then whether the loops are compiled."""
_warming = False
"""Whether :func:`warm` has started the compile on a thread already."""
_warm_lock = threading.Lock()
"""Guards :data:`_warming` (never :data:`_lock`, which the compile holds for its whole run)."""


class Loop:
    """A plain Python function numba may compile. ``warm`` calls it on small arguments of
    every type layout the callers pass, so that it compiles (or loads from numba's cache) once,
    up front, and never in the middle of a scan."""

    def __init__(self, fn: Callable[..., Any], warm: Callable[[Callable[..., Any]], None]):
        self.fn, self._warm = fn, warm
        self.compiled: Callable[..., Any] | None = None

    def _compile(self, numba: Any) -> None:
        self.compiled = numba.njit(nogil=True, cache=True)(self.fn)
        self._warm(self.compiled)


def loop(warm: Callable[[Callable[..., Any]], None]) -> Callable[[Callable[..., Any]], Loop]:
    """Register the decorated function as a loop to compile (see :class:`Loop`)."""

    def register(fn: Callable[..., Any]) -> Loop:
        global _on
        got = Loop(fn, warm)
        with _lock:
            _loops.append(got)
            if _on and not _compile_all([got]):  # chosen and compiled already: this one too
                _on = False  # all or none: a caller checks on(), never a loop of its own
                for one in _loops:
                    one.compiled = None
        return got

    return register


def _compile_all(loops: list[Loop]) -> bool:
    try:
        import numba
    except Exception as e:  # not installed, or its llvmlite does not load on this platform
        log.warning("efface's scan runs its numpy versions (numba unavailable: %s)", type(e).__name__)
        return False
    try:
        for one in loops:
            one._compile(numba)
    except Exception as e:  # a numba that imports but cannot compile here: numpy still works
        log.warning("efface's scan runs its numpy versions (numba could not compile: %s)", type(e).__name__)
        for one in loops:
            one.compiled = None
        return False
    return True


def on() -> bool:
    """Whether the loops are compiled: chosen (and compiled) on first call, once per process."""
    global _on
    if _on is not None:
        return _on
    with _lock:
        if _on is None:
            wanted = os.environ.get(KERNEL_ENV, "").strip().lower() != "numpy"
            _on = wanted and _compile_all(list(_loops))
    return _on


def for_scan(nbytes: int) -> bool:
    """Whether a scan of ``nbytes`` uses the compiled loops: yes once they are compiled; for
    a scan of at least :data:`COMPILE_AT` bytes, compiled now if need be; else numpy."""
    if _on is not None or nbytes >= COMPILE_AT:
        return on()
    return False


def ready() -> bool:
    """Whether the loops are compiled already (never compiles: for steps too small to wait)."""
    return bool(_on)


def warm(root: str, files: Sequence[str] | None = None) -> None:
    """For a store of at least :data:`COMPILE_AT` bytes, compile the loops on a background
    thread (once per process), so that its first erasure does not wait for numba (about a
    second: numba's import and its cache, more on a machine's first run), and its recalls
    use the compiled loops (:mod:`efface.vectors`, :mod:`efface.origin.sqlite.postings`),
    which use them once they are ready and never wait for them. The store's size is the
    files in ``root``, or ``files`` where the caller knows which grow (a stat of each,
    about 1 us, where listing ``root`` takes ~30: a store calls this after every write)."""
    if _on is not None or _warming:
        return
    try:
        if files is None:
            size = sum(e.stat().st_size for e in os.scandir(root) if e.is_file())
        else:
            size = sum(_size(f) for f in files)
    except OSError:
        return  # nothing to size yet: the first large scan compiles instead
    if size >= COMPILE_AT:
        warm_now()


def warm_now() -> None:
    """Compile the loops on a background thread, once per process (a caller that knows it is
    large by other means than its files: the PostgreSQL origin's word index in memory)."""
    global _warming
    if _on is not None or _warming:  # without the lock: the compile holds it for its whole run,
        return  # and a recall that asks while it runs must not wait for it
    with _warm_lock:
        if _on is not None or _warming:
            return
        _warming = True
    threading.Thread(target=on, name="efface-compile", daemon=True).start()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:  # a WAL not made yet
        return 0


def reset() -> None:
    """Forget the choice made (tests, and benchmarks that compare the two): the next scan
    chooses again, reading ``EFFACE_SCAN_KERNEL``."""
    global _on, _warming
    with _lock:
        _on, _warming = None, False
        for one in _loops:
            one.compiled = None
