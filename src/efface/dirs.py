"""A store's directories: one process at a time in each, and renames in them made durable.

:func:`lock_dir`: an embedded store's own directory (:mod:`efface.embedded`) and a PostgreSQL
store's cache directory (:mod:`efface.on_postgres`) are held by one process. The lock is an
advisory ``flock`` on ``efface.lock`` in the directory, held on its own open file: a second
open of the directory, from another process or from this one, is refused at once with
:class:`~efface.errors.StoreLocked`, never left waiting.

:func:`fsync_dir`: a file renamed into place (an origin's, an index's, a backup's, the key
file) survives a crash only once its directory is synced too.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from .errors import StoreLocked
from .faults import os_faults


def lock_dir(root: str, busy: str, *, mode: int = 0o777) -> IO[str]:
    """``root`` (made, with ``mode``, if missing) held by this process: its lock file, open and
    locked (unlock and close it to let go). :class:`~efface.errors.StoreLocked` saying ``busy``
    if it is held already; a file system that cannot make it, the typed error of
    :func:`~efface.faults.os_faults`."""
    with os_faults():  # a read-only or full file system: a typed error, never a bare OSError
        os.makedirs(root, mode=mode, exist_ok=True)
        lockfile = open(os.path.join(root, "efface.lock"), "a+")  # noqa: SIM115 - held until released
    try:
        fcntl.flock(lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lockfile.close()
        raise StoreLocked(busy) from None
    return lockfile


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
