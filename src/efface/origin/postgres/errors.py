"""What the PostgreSQL origin raises beyond :mod:`efface.errors`, placed in its tree:

    EffaceError
     ├── KeyFileError            the key-encryption key file cannot be used
     │    ├── KeyFileMissing     no file named, or the named file is gone while the
     │    │                      database holds data keys wrapped by a key
     │    └── KeyFileMismatch    the file's key is not the one the database's data keys are
     │                           wrapped by (another store's file, an old copy)
     ├── NotFound
     │    └── DataKeyDestroyed   sealed content whose subject's data key was destroyed
     └── StoreDamaged
          └── SchemaTooNew       the database was migrated by a newer efface

A read that demands a state including epoch E and cannot get it in time raises
:class:`efface.errors.ErasureNotSettled` (``scope="replica"``), as any read path behind an
erasure does. Sealed content that fails authentication raises :class:`efface.errors.StoreDamaged`.

They live here, not in :mod:`efface.errors`, only while the seam is being reworked (issue
#34 item 1); they move there with the rest of the PostgreSQL origin. Messages never hold
keys, texts, subjects or key material.
"""

from __future__ import annotations

from ...errors import EffaceError, NotFound, StoreDamaged


class KeyFileError(EffaceError):
    """The key-encryption key file (``--kek-file`` / ``EFFACE_KEK_FILE``) cannot be used;
    nothing was read or written."""


class KeyFileMissing(KeyFileError):
    """No key file was named, or the one named does not exist although the database holds
    data keys wrapped by a key-encryption key: restore the file from its backup. efface never
    makes a new key for a store that has data keys (the sealed content would be lost)."""


class KeyFileMismatch(KeyFileError):
    """The key file holds no key the database's data keys are wrapped by: it belongs to
    another store, or is an old copy from before a rotation. Name the store's current file."""

    def __init__(self, message: str, *, expected: str | None = None, found: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        """The id (a check value, not key material) of the key the database expects."""
        self.found = found
        """The ids of the keys the file holds."""


class KeyFileCreated(UserWarning):
    """A new key-encryption key file was created (first use of a store): back it up."""


class DataKeyDestroyed(NotFound):
    """The content was sealed with a data key that has been destroyed (its subject was
    erased): it cannot be read by anyone, which is the point."""


class SchemaTooNew(StoreDamaged):
    """The database's efface schema is newer than this efface knows: upgrade efface; nothing
    was changed."""
