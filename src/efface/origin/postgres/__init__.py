"""The PostgreSQL origin, split by job (issue #34), as ``origin/sqlite/`` is:

* :mod:`.schema`  the tables efface creates in its own schema, and their migration
* :mod:`.epochs`  epochs assigned in the committing transaction, in commit order across
                  processes, each with its commit's LSN; reads that demand "at least epoch E"
* :mod:`.keys`    the key-encryption key from the operator's file, per-subject data keys
                  that seal content, their destruction and the KEK's rotation
* :mod:`.errors`  what these raise beyond :mod:`efface.errors`
* :mod:`.sealing` content sealed in this process with the data keys, opened on reads
* :mod:`.origin`  :class:`~.origin.PostgresOrigin`: connections, transactions, snapshots,
                  per-process meta, the change log's readers
* :mod:`.reads`   the origin's reads; :mod:`.tx` and :mod:`.txmore` its write transaction
* :mod:`.text`    the word index, in this process's memory, kept up from the change log
* :mod:`.locks`   named advisory locks every efface process of the store sees

Not yet: the byte ladder (``physical``), replicas, verification under its advisory lock (see
docs/postgres.md, "What is built").

Importing this package needs the ``postgres`` extra (psycopg 3) only where a module talks to
the database; :mod:`.errors` and :mod:`.schema` import nothing beyond efface.
"""

from .errors import DataKeyDestroyed, KeyFileCreated, KeyFileError, KeyFileMismatch, KeyFileMissing, SchemaTooNew

__all__ = [
    "DataKeyDestroyed",
    "KeyFileCreated",
    "KeyFileError",
    "KeyFileMismatch",
    "KeyFileMissing",
    "SchemaTooNew",
]
