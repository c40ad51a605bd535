"""Whether the server's buffer cache holds what recall reads (docs/postgres.md, *Recall*, "How
recall grows with the store").

Each recall walks pgvector's HNSW graph (``records_embedding``) and reads ``records`` rows: at
100k to 300k records the walk touches about 1,000-1,100 pages, growing logarithmically with the
store. When ``shared_buffers`` does not hold the index, a recall reads many of those pages from
the OS cache instead (measured at 300k with 256MB: 640 of 1,129, and the server's CPU a recall
up 64-65 % from 100k against 4-20 % with the store in the buffers). :func:`advice` says so once,
at open, in the log; efface never changes the server's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

MIB = 2**20


def advice(index_bytes: int, heap_bytes: int, buffers_bytes: int) -> str | None:
    """A line for the log when ``shared_buffers`` (``buffers_bytes``) is smaller than recall's
    HNSW index (``index_bytes``); None when it holds it. Sizes only: nothing of the content."""
    if index_bytes <= buffers_bytes:
        return None
    return (
        f"PostgreSQL's shared_buffers ({_size(buffers_bytes)}) is smaller than the store's HNSW index "
        f"({_size(index_bytes)}; records {_size(heap_bytes)}): each recall reads much of the graph from "
        "the OS cache, at a cost that grows with the store. Give the server shared_buffers that hold the index, "
        "and records if you can (docs/postgres.md, Recall)"
    )


def _size(n: int) -> str:
    return f"{n // MIB:,} MiB" if n >= MIB else f"{n // 1024} kB"


def check(conn: psycopg.Connection, schema: str) -> str | None:
    """:func:`advice` for the store in ``schema`` on ``conn``'s server."""
    row = conn.execute(
        "SELECT coalesce(pg_relation_size(to_regclass(%s)), 0), coalesce(pg_relation_size(to_regclass(%s)), 0),"
        " pg_size_bytes(current_setting('shared_buffers'))",
        (f"{schema}.records_embedding", f"{schema}.records"),
    ).fetchone()
    return None if row is None else advice(int(row[0]), int(row[1]), int(row[2]))
