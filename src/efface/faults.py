"""What a fault of the machine under the store means for the caller.

The operating system reports a read-only directory, a full disk or a file of the wrong kind
as an ``OSError`` that names the path; efface turns it into :class:`~efface.errors.StoreUnwritable`
or :class:`~efface.errors.StoreDamaged` with a message that says what to do and names no path
(a store's path may name a person). The SQLite origin translates its own errors the same way
(:mod:`efface.origin.sqlite.edge`), with these messages.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from .errors import EffaceError, StoreDamaged, StoreUnwritable

FULL = "the disk holding the store is full: free some space and try again (what was not acknowledged was not written)"
READ_ONLY = (
    "the store's directory cannot be written (a read-only directory or file system, or no permission): "
    "make it writable, or copy the store somewhere writable and open the copy"
)
IO_ERROR = (
    "the store's files could not be read or written (a disk I/O error): check the disk, then try again; "
    "if the error stays, restore the store from a backup copy"
)
CLOSED = "the store is closed; open it again with efface.open()"

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
_WRONG_KIND = {errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ELOOP}


def translate(exc: OSError) -> EffaceError:
    """The efface error an ``OSError`` on the store's own files stands for."""
    if exc.errno in _FULL:
        return StoreUnwritable(FULL)
    if exc.errno in _READ_ONLY:
        return StoreUnwritable(READ_ONLY)
    if exc.errno in _WRONG_KIND:
        return StoreDamaged(
            "the store is damaged: one of its files or folders is of the wrong kind (a file where a "
            f"directory belongs, or the reverse; {errno.errorcode.get(exc.errno or 0, 'unknown')}): "
            "restore the store directory from a backup copy"
        )
    return StoreUnwritable(f"{IO_ERROR} ({errno.errorcode.get(exc.errno or 0, 'unknown')})")


@contextlib.contextmanager
def os_faults() -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into its efface error."""
    try:
        yield
    except OSError as exc:
        # from None: the OSError's text names the path, and tracebacks end up in logs
        raise translate(exc) from None
