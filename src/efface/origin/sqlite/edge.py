"""The SQLite origin's edge: where apsw's errors become efface's, so nothing above the origin
ever sees a raw SQLite error.

* ``CorruptError``, ``NotADBError`` (a garbled header, a truncated file, a garbled page of
  records, claims, the FTS index or the ledger) become :class:`~efface.errors.StoreDamaged`,
  raised at open or by the first operation that meets the damage: SQLite checks each page
  as it reads it, so damage in a table nobody reads yet is found when someone does;
* ``FullError`` (a full disk), ``ReadOnlyError``, ``CantOpenError``, ``PermissionsError``
  (a read-only directory or file system) and ``IOError`` become
  :class:`~efface.errors.StoreUnwritable`; SQLite rolls the transaction back first, so
  nothing unacknowledged is left half-written;
* ``ConnectionClosedError`` (a call racing ``close()``) becomes the closed-store error.

Any other apsw error (a constraint, an SQL mistake) is a bug of efface and stays as it is.
Every public method of the origin's classes is wrapped (:func:`guarded`); the two context
managers (``snapshot``, ``transaction``) hold :func:`edge` around their whole block, so an
error raised by a statement inside the caller's ``with`` is translated too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import apsw

from ...errors import EffaceError, StoreDamaged, StoreUnwritable
from ...faults import CLOSED, FULL, IO_ERROR, READ_ONLY

DAMAGED = (
    "the store is damaged (its origin.db fails SQLite's checks): restore the store directory from a "
    "backup copy; an efface backup file can only be restored into the store that made it"
)

NEARLY_FULL = 1 << 20
"""Free bytes under which an I/O error is taken for a full disk."""

_T = TypeVar("_T")


def _full(path: str | None) -> bool:
    """Whether the file system holding ``path`` has (next to) no room left. SQLite reports a
    full disk as FullError when a page write fails, but as a bare I/O error when it cannot
    grow its shared-memory file (``-shm``), which every connection needs, readers too."""
    if path is None:
        return False
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL


def translate(exc: apsw.Error, path: str | None = None) -> EffaceError | None:
    """The efface error an apsw error stands for, or None for a bug of efface's own.
    ``path``: the origin's file, to tell a full disk behind an I/O error."""
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return StoreDamaged(DAMAGED)
    if isinstance(exc, apsw.FullError):
        return StoreUnwritable(FULL)
    if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError)):
        return StoreUnwritable(READ_ONLY)
    if isinstance(exc, apsw.IOError):
        return StoreUnwritable(FULL if _full(path) else IO_ERROR)
    if isinstance(exc, apsw.ConnectionClosedError):
        return EffaceError(CLOSED)
    return None


@contextlib.contextmanager
def edge(path: str | None = None) -> Iterator[None]:
    """Translate the apsw errors raised inside the block (see the module docstring)."""
    try:
        yield
    except apsw.Error as exc:
        translated = translate(exc, path)
        if translated is None:
            raise
        raise translated from exc


@contextlib.contextmanager
def savepoint(conn: apsw.Connection) -> Iterator[None]:
    """What ``with conn:`` does (a savepoint, released on success, rolled back on error), in
    statements. apsw's own context manager commits holding the GIL, so its fsync froze every
    other thread of the process (a served store's recalls among them) for the commit's length:
    measured, a thread beside 3 ms commits stalled 3.2 ms p50 with it, 0.27 ms with statements,
    which release the GIL like every other ``execute``."""
    conn.execute("SAVEPOINT efface")
    try:
        yield
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled the whole transaction back already
            conn.execute("ROLLBACK TO efface")
            conn.execute("RELEASE efface")
        raise
    conn.execute("RELEASE efface")


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded_call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except apsw.Error as exc:
            owner = args[0] if args else None  # the origin, or its physical or text part
            translated = translate(
                exc, getattr(owner, "path", None) or getattr(getattr(owner, "_db", None), "path", None)
            )
            if translated is None:
                raise
            raise translated from exc

    return guarded_call


def guarded(cls: type[_T]) -> type[_T]:
    """Wrap every public method of ``cls`` (and its ``__init__``) in the edge."""
    for name, member in list(vars(cls).items()):
        if inspect.isfunction(member) and (name == "__init__" or not name.startswith("_")):
            setattr(cls, name, _guard(member))
    return cls
