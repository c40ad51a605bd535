"""What a test PostgreSQL server's files hold, byte for byte."""

from __future__ import annotations

import os

from efface.origin.postgres import maintenance


def files_holding(pg_db, needles: list[bytes]) -> dict[str, int]:
    """Files of the database's directory (its tables, indexes and catalogs, pg_statistic among
    them) and of pg_wal holding any of ``needles``, with their counts, after a CHECKPOINT (the
    files then hold what the buffers hold)."""
    with pg_db.connect() as conn:
        conn.execute("CHECKPOINT")
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    data_dir = str(pg_db.server.datadir)
    hits: dict[str, int] = {}
    for path in maintenance.db_files(f"{data_dir}/base/{dboid}") + maintenance.wal_files(data_dir):
        with open(path, "rb") as f:
            data = f.read()
        n = sum(data.count(x) for x in needles)
        if n:
            hits[os.path.relpath(path, data_dir)] = n
    return hits
