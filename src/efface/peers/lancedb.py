"""LanceDB: its gate adapter (:class:`LanceDBTool`) and its audit driver (:class:`LanceDBDriver`).

Adapter (``efface.adapters.lancedb`` is an alias of this module). Scope -> one table
(columns ``key``, ``text``, ``subject``, ``metadata`` (JSON), ``vector``); vectors from an
efface embedder. ``forget`` acknowledges with exactly what ``table.delete`` returned
(LanceDB 0.40: ``DeleteResult(num_deleted_rows, version)``). The new version number is
*not* an erasure epoch in the gate's sense: older versions stay readable through
``checkout`` until ``optimize``/cleanup removes them, so ``epoch`` stays None.

Audit driver (``efface audit lancedb``): a directory of Lance tables; scope = one table.
Read paths probed: a filter on the id column, a filter on the subject column, nearest
neighbours of the deleted vectors, full-text search when the table has an FTS index, and
every older version still on disk (LanceDB's time travel, ``checkout(version)``).
Maintenance: ``optimize(cleanup_older_than=timedelta(0), delete_unverified=True)``,
LanceDB's own compaction plus removal of old versions; it rewrites a fragment only when at
least 10% of its rows are deleted, so an extra stage runs Lance's ``compact_files`` with
every deletion materialised (pylance, the library underneath LanceDB). Lance files compress strings, so a
raw byte scan misses texts; the driver adds a decoded view of each ``.lance`` file, read
with pylance's ``LanceFileReader`` (it sees rows a deletion file only masks).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.driver import BaseDriver, Call, count_returned, no_targets, version
from ..audit.model import ProbeResult, Selection, Targets
from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now


def _quote(value: object) -> str:
    """A string literal in LanceDB's SQL-like filter strings."""
    return "'" + str(value).replace("'", "''") + "'"


def _table_names(db) -> list[str]:
    """Table names across LanceDB versions (``list_tables`` replaced ``table_names``)."""
    if hasattr(db, "list_tables"):
        got = db.list_tables()
        names = getattr(got, "tables", got)
        return [n if isinstance(n, str) else getattr(n, "name", str(n)) for n in names]
    return list(db.table_names())


# == the gate adapter ================================================================================
class LanceDBTool:
    """A LanceDB database directory as a MemoryTool."""

    name = "lancedb"

    def __init__(self, path: str | os.PathLike, *, embedder_spec: Any = None):
        lancedb = need("lancedb", "lancedb")
        self.db = lancedb.connect(os.fspath(path))
        self.embedder = embedder(embedder_spec)

    def _table(self, scope: str, create_with: list | None = None):
        if scope in _table_names(self.db):
            return self.db.open_table(scope)
        if create_with is None:
            return None
        return self.db.create_table(scope, data=create_with)

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        row = {
            "key": key,
            "text": text,
            "subject": subject or "",
            "metadata": json.dumps(dict(metadata or {}), ensure_ascii=False),
            "vector": self.embedder.embed([text])[0],
        }
        table = self._table(scope)
        if table is None:
            self._table(scope, [row])
            return
        table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([row])

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        table = self._table(scope)
        if table is None:
            return []
        rows = table.search(self.embedder.embed([query])[0]).metric("cosine").limit(k).to_list()
        return [
            ToolHit(r["key"], r["text"], 1.0 - float(r["_distance"]), json.loads(r["metadata"] or "{}")) for r in rows
        ]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        check_selector(subject, keys)
        table = self._table(scope)
        if table is None:
            return ForgetAck(raw=None, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())
        parts = []
        if keys:
            parts.append(f"key IN ({', '.join(_quote(k) for k in keys)})")
        if subject is not None:
            parts.append(f"subject = {_quote(subject)}")
        raw = table.delete(" AND ".join(parts))
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())


# == the audit driver ================================================================================
class LanceDecoder:
    """Decoded view of a ``.lance`` file: its string columns as UTF-8, its float vectors as float32."""

    label = "lance"

    def __call__(self, path: Path) -> bytes | None:
        if path.suffix != ".lance":
            return None
        try:
            from lance.file import LanceFileReader

            table = LanceFileReader(str(path)).read_all().to_table()
        except Exception:  # index files and others that are not plain Lance data files
            return None
        import pyarrow as pa

        parts: list[bytes] = []
        for col in table.columns:
            t = col.type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                parts.append("\n".join(x for x in col.to_pylist() if x).encode("utf-8"))
            elif pa.types.is_fixed_size_list(t) and pa.types.is_floating(t.value_type):
                arr = np.asarray(col.combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
                parts.append(arr.tobytes())
        return b"\n".join(parts)


class LanceDBDriver(BaseDriver):
    kind = "lancedb"

    def __init__(
        self,
        collection: str | None = None,
        id_field: str = "id",
        text_field: str = "text",
        vector_field: str = "vector",
    ):
        self.collection = collection or ""
        self.id_field, self.text_field, self.vector_field = id_field, text_field, vector_field
        self._db: Any = None
        self._table: Any = None

    def library(self) -> str:
        return f"{version('lancedb')}, {version('pylance')}"

    def open(self, root: Path) -> None:
        lancedb = need("lancedb", "lancedb", for_audit=True)
        self._db = lancedb.connect(str(root))
        names = _table_names(self._db)
        if not self.collection:
            if len(names) != 1:
                raise InvalidInput(f"the database has {len(names)} tables: name one with --collection")
            self.collection = names[0]
        if self.collection not in names:
            raise InvalidInput("no such table in this LanceDB database: check --collection")
        self._table = self._db.open_table(self.collection)
        missing = {self.id_field, self.text_field} - set(self._t.schema.names)
        if missing:
            raise InvalidInput("the table lacks the id or text column: pass --id-field / --text-field")

    def close(self) -> None:
        self._db = self._table = None

    @property
    def _t(self) -> Any:
        """The open table (lancedb ships no types)."""
        return self._opened(self._table)

    def _predicate(self, selection: Selection) -> str:
        if selection.ids is not None:
            return f"{self.id_field} IN ({', '.join(_quote(i) for i in selection.ids)})"
        return f"{selection.subject_field} = {_quote(selection.subject)}"

    def _rows(self, table, predicate: str | None, columns: list[str]):
        q = table.search().select(columns)
        if predicate:
            q = q.where(predicate)
        return q.limit(max(1, table.count_rows())).to_arrow()

    def targets(self, selection: Selection) -> Targets:
        cols = [self.id_field, self.text_field] + ([self.vector_field] if self._has_vectors() else [])
        rows = self._rows(self._t, self._predicate(selection), cols)
        if not rows.num_rows:
            raise no_targets()
        vectors = (
            np.asarray(rows[self.vector_field].to_pylist(), dtype=np.float32)
            if self._has_vectors()
            else np.zeros((0, 0), np.float32)
        )
        return Targets(
            tuple(str(x) for x in rows[self.id_field].to_pylist()),
            tuple(x or "" for x in rows[self.text_field].to_pylist()),
            vectors,
        )

    def _has_vectors(self) -> bool:
        return self.vector_field in self._t.schema.names

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray | None]:
        cols = [self.id_field, self.text_field] + ([self.vector_field] if self._has_vectors() else [])
        rows = self._t.to_arrow().select(cols)
        mine = set(targets.ids)
        keep = [i for i, x in enumerate(rows[self.id_field].to_pylist()) if str(x) not in mine]
        rows = rows.take(keep)
        vecs = np.asarray(rows[self.vector_field].to_pylist(), dtype=np.float32) if self._has_vectors() else None
        return [x or "" for x in rows[self.text_field].to_pylist()], vecs

    def delete(self, selection: Selection, targets: Targets) -> Call:
        return Call("table.delete(predicate)", self._t.delete(self._predicate(selection)))

    def _fts(self) -> bool:
        try:
            kinds = (str(getattr(i, "index_type", "")).lower() for i in self._t.list_indices())
            return any("fts" in k or "inverted" in k for k in kinds)
        except Exception:
            return False

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        cols = [self.id_field, self.text_field]
        out = []
        ids_pred = f"{self.id_field} IN ({', '.join(_quote(i) for i in targets.ids)})"
        rows = self._rows(self._t, ids_pred, cols)
        out.append(
            ProbeResult(
                "filter by id",
                n,
                count_returned(targets, rows[self.id_field].to_pylist(), rows[self.text_field].to_pylist()),
                f"{rows.num_rows} rows returned for {n} ids",
            )
        )
        if selection.subject is not None:
            rows = self._rows(self._t, self._predicate(selection), cols)
            out.append(
                ProbeResult(
                    "filter by subject column",
                    n,
                    count_returned(targets, rows[self.id_field].to_pylist(), rows[self.text_field].to_pylist()),
                    f"{rows.num_rows} rows matched",
                )
            )
        total = self._t.count_rows()
        if len(targets.vectors) and total:
            ids, texts = [], []
            for v in targets.vectors:
                r = self._t.search(v, vector_column_name=self.vector_field).limit(10).to_arrow()
                ids += r[self.id_field].to_pylist()
                texts += r[self.text_field].to_pylist()
            out.append(
                ProbeResult(
                    "nearest neighbours of the deleted vectors",
                    n,
                    count_returned(targets, ids, texts),
                    f"{len(targets.vectors)} queries, k=10",
                )
            )
        if self._fts():
            found = 0
            for text in targets.texts:
                r = self._t.search(text, query_type="fts").limit(10).to_arrow()
                found += bool(count_returned(targets, r[self.id_field].to_pylist(), r[self.text_field].to_pylist()))
            out.append(ProbeResult("full-text search (FTS index)", n, found, f"{n} queries, one per deleted text"))
        versions = [v["version"] for v in self._t.list_versions()]
        latest = max(versions)
        hit: set[int] = set()
        serving = 0
        for v in versions:
            if v == latest:
                continue
            old = self._opened(self._db).open_table(self.collection)
            old.checkout(v)
            rows = self._rows(old, ids_pred, cols)
            got = count_returned(targets, rows[self.id_field].to_pylist(), rows[self.text_field].to_pylist())
            if got:
                serving += 1
                hit.update(i for i, x in enumerate(targets.ids) if x in set(map(str, rows[self.id_field].to_pylist())))
        out.append(
            ProbeResult(
                "old versions (checkout)",
                n,
                len(hit),
                f"{len(versions) - 1} older version(s) on disk, {serving} return deleted rows",
            )
        )
        return out

    def maintenance(self, root: Path) -> list[Call]:
        self.open(root)
        try:
            ret = self._t.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
        finally:
            self.close()
        return [Call("table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)", ret)]

    def extra_maintenance(self):
        """Lance's own compaction with every deletion materialised, then cleanup: LanceDB's
        ``optimize`` only rewrites a fragment once 10% of its rows are deleted
        (``materialize_deletions_threshold``), so a small forget stays in the data file."""
        return [
            (
                "extra: lance compact_files(materialize_deletions_threshold=0) + cleanup_old_versions(0) "
                "(pylance, beyond LanceDB's optimize)",
                self._compact_all,
            )
        ]

    def _compact_all(self, root: Path) -> list[Call]:
        import lance

        ds = lance.dataset(str(root / f"{self.collection}.lance"))
        metrics = ds.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)
        stats = lance.dataset(str(root / f"{self.collection}.lance")).cleanup_old_versions(
            older_than=timedelta(0), delete_unverified=True
        )
        return [
            Call(
                "dataset.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)",
                metrics,
            ),
            Call("dataset.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)", stats),
        ]

    def decoders(self):
        try:
            import lance.file  # noqa: F401
        except ImportError:
            return ()
        return (LanceDecoder(),)
