"""The SQLite origin, split by job: schema, write transaction, origin, text index, physical."""

from .origin import SQLiteOrigin, fsync_dir
from .tx import SQLiteTx

__all__ = ["SQLiteOrigin", "SQLiteTx", "fsync_dir"]
