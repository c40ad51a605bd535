#!/usr/bin/env python
"""The generated tables of docs/benchmarks.md, printed from the result files under bench/results/.

    python bench/tables/current.py            # print every table
    python bench/tables/current.py --check    # exit 1 if docs/benchmarks.md differs from them
    python bench/tables/current.py --write    # put them into docs/benchmarks.md

In the document each table sits between ``<!-- table: NAME ... -->`` and ``<!-- /table -->``;
the text around them (what the figures mean, the targets) is written by hand. To publish a
newer run: add its JSON under bench/results/, point ``SOURCES`` at it, ``--write``, and
rewrite the prose beside the table. ``tests/test_bench_tables.py`` fails when the document
and the files disagree.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent
RESULTS = BENCH / "results"
DOC = BENCH.parent / "docs" / "benchmarks.md"

SOURCES = {
    "quality": "session28/quality-minilm-f2cc195.json",
    "recall_100k": [
        "session20/recall-latency-100k-chroma-7266884-run1.json",
        "session20/recall-latency-100k-chroma-7266884-run2.json",
    ],
    "recall_1m": "session20/recall-latency-1m-chroma-2d25952.json",
    "store": "session22/store-a8b799a.json",
    "ingest": "session22/ingest-cfffbf0.json",
    "sqlite_alone": "session22/sqlite-alone-200k.json",
    "erasure": "session22/erasure-cfffbf0.json",
    "extremes": "session23/extremes.json",
    "postgres": [
        "postgres/scale-100k-5d70974.json",  # branch pgspeed3 (the src of 8445b34); the rest older runs
        "postgres/scale-10k.json",
        "postgres/scale-100k-7fc1add.json",
        "postgres/scale-100k.json",
    ],
    "postgres_residue": "postgres/scale-100k-5d70974.json",
    "postgres_quality": "postgres/quality-e31ae6b.json",
}
"""Table -> the result file(s) it is printed from, relative to bench/results/."""

_BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+)[^>]*-->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def _load(rel: str) -> dict[str, Any]:
    return json.loads((RESULTS / rel).read_text(encoding="utf-8"))


def _n(x: float, nd: int = 0) -> str:
    return f"{x:,.{nd}f}"


def _sizes(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(doc["sizes"].items(), key=lambda kv: int(kv[0]))


def _when(doc: dict[str, Any]) -> str:
    return doc["started_at"][:16].replace("T", " ") + " UTC"


def _load_avg(sizes: list[tuple[str, dict[str, Any]]]) -> str:
    loads = [s["loadavg_1min_during"]["mean"] for _, s in sizes]
    return f"{min(loads):.1f}–{max(loads):.1f}"


def _table(head: list[str], rows: list[list[str]], right_from: int = 1) -> str:
    align = ["---" if i < right_from else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def _rows_by_size(
    sizes: list[tuple[str, dict[str, Any]]], rows: list[tuple[str, Callable[[dict[str, Any]], str]]]
) -> str:
    head = ["", *(f"{int(n):,}" for n, _ in sizes)]
    return _table(head, [[label, *(fn(s) for _, s in sizes)] for label, fn in rows])


# -- the tables ----------------------------------------------------------------------------------
def quality() -> str:
    doc = _load(SOURCES["quality"])
    systems = [
        ("**efface recall** (int8 query encode, as shipped)", "efface.recall"),
        ("its full-text leg alone", "efface.fts_leg"),
        ("its ANN leg alone", "efface.ann_leg"),
        ("exact cosine over every vector", "exact"),
        ("BM25 over every word (FTS5, porter)", "bm25_porter"),
        ("reciprocal-rank fusion of those two", "rrf_exact_bm25"),
        ("LanceDB hybrid", "lancedb.hybrid"),
        ("LanceDB full text", "lancedb.fts"),
    ]
    runs = doc["runs"]
    head = [
        "recall@1 / recall@10 / MRR@10",
        *(f"{r['corpus']} ({r['docs']:,} documents, {r['queries']:,} queries)" for r in runs),
    ]

    def cell(run: dict[str, Any], key: str) -> str:
        m = run["systems"].get(key)
        return "—" if m is None else f"{m['recall@1']:.3f} / {m['recall@10']:.3f} / {m['mrr@10']:.3f}"

    rows = [[label, *(cell(r, key) for r in runs)] for label, key in systems]
    note = (
        f"`{SOURCES['quality']}`: commit {doc['commit']}, {doc['date'][:16].replace('T', ' ')} UTC, "
        f"{doc['machine']['cpus']} cores, load {doc['load_before'][0]:.1f} before, "
        f"{doc['load_after'][0]:.1f} after; embedder {runs[0]['embedder']}.\n\n"
    )
    return note + _table(head, rows, right_from=len(head))


def recall_latency() -> str:
    docs = [(rel, _load(rel)) for rel in [*SOURCES["recall_100k"], SOURCES["recall_1m"]]]
    head = [
        "records, commit, run (UTC, load before/after)",
        "efface search",
        "efface end to end",
        "Chroma search",
        "Chroma end to end",
        "efface / Chroma search p50",
    ]

    def q(d: dict[str, float]) -> str:
        return f"{d['p50']:.2f} / {d['p90']:.2f} / {d['p99']:.2f}"

    rows = []
    for rel, d in docs:
        lat, load = d["latency_ms"], d["load_average_before_after"]
        rows.append(
            [
                f"{_n(d['n'])}, {d['commit']}, {d['machine']['date'][11:16]} ({load[0]:.1f}/{load[3]:.1f}), "
                f"`{rel.split('/')[-1]}`",
                q(lat["efface"]["search"]),
                q(lat["efface"]["end_to_end"]),
                q(lat["chroma"]["search"]),
                q(lat["chroma"]["end_to_end"]),
                f"{lat['efface']['search']['p50'] / lat['chroma']['search']['p50']:.2f}×",
            ]
        )
    d = docs[-1][1]
    note = (
        f"p50 / p90 / p99, ms; {d['queries']} queries, k = {d['k']}, the same MiniLM vectors to both stores; "
        f"{d['machine']['cpus']} cores ({d['machine']['date'][:10]}); end to end includes the query's encode "
        "(efface: the int8 ONNX copy).\n\n"
    )
    return note + _table(head, rows, right_from=1)


def store() -> str:
    doc = _load(SOURCES["store"])
    sizes = _sizes(doc)
    m = doc["machine"]
    note = (
        f"`{SOURCES['store']}`: `{doc['command']}`, commit {m['git_commit']}, {_when(doc)}, "
        f"{m['cpu_model']} {m['physical_cores']} cores, {m['ram_gib']} GiB, load {_load_avg(sizes)} "
        "(mean per size). `background=False`: the first recall absorbs the whole import.\n\n"
    )

    def lat(d: dict[str, float], nd: int = 1) -> str:
        return f"{d['p50']:,.{nd}f} / {d['p99']:,.{nd}f}"

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        (
            "`write_many`, batches of 1,000 (records/s, embedding excluded)",
            lambda s: _n(s["batched_write"]["records_per_s"]),
        ),
        (
            "first recall after the bulk write (s; the ANN absorbs the import)",
            lambda s: _n(s["after_build"]["first_recall_s"], 2),
        ),
        ("single durable write, p50 / p99 (ms)", lambda s: lat(s["single_write"]["latency_ms"], 2)),
        ("recall k=10, p50 / p99 (ms, hashing query embedding included)", lambda s: lat(s["recall"]["latency_ms"])),
        ("`forget` of a 100-record subject, p50 / p99 (ms)", lambda s: lat(s["forget"]["latency_ms"], 0)),
        ("`wait()` right after it, p50 (ms)", lambda s: _n(s["forget"]["wait_ms"]["p50"])),
        (
            "peak RSS / RSS at the end (MiB, the bench's corpus included)",
            lambda s: f"{_n(s['peak_rss_mib'])} / {_n(s['rss_mib_end'])}",
        ),
        (
            "disk after close: total / `origin.db` / ANN (MiB)",
            lambda s: " / ".join(
                _n(s["disk_after_close"][k], 1) for k in ("total_mib", "origin.db_mib", "ann/*.usearch_mib")
            ),
        ),
    ]
    mini = doc.get("minilm") or {}
    tail = (
        f"\nMiniLM in the same run: {_n(mini['sentences_per_s'], 1)} sentences/s, batch {mini['batch_size']}, "
        f"{mini['torch_threads']} torch threads; one sentence alone {mini['single_sentence_embed_ms']:.1f} ms.\n"
        if mini
        else ""
    )
    return note + _rows_by_size(sizes, rows) + tail


def ingest() -> str:
    doc = _load(SOURCES["ingest"])
    alone = _load(SOURCES["sqlite_alone"])
    runs = list(doc["results"].items())
    head = ["200,000 records", *(f"run {i} (`{name.split('@')[0]}`)" for i, (name, _) in enumerate(runs, 1))]

    def row(label: str, fn: Callable[[dict[str, Any]], str]) -> list[str]:
        return [label, *(fn(r) for _, r in runs)]

    def pct(d: dict[str, float]) -> str:
        return f"{d['p50']:.1f} / {d['p99']:.1f}"

    rows = [
        row("`write_many` (records/s)", lambda r: _n(r["import"]["write_many_rps"])),
        row(
            "**ingest until recallable** (records/s)", lambda r: f"**{_n(r['import']['ingest_until_recallable_rps'])}**"
        ),
        row(
            "first recall after the import (ms), found the last record",
            lambda r: (
                f"{r['import']['first_recall_s'] * 1000:.0f}, "
                + ("yes" if r["import"]["first_recall_found_last_record"] else "no")
            ),
        ),
        row("recall while the ANN absorbs the import, p50 / p99 (ms)", lambda r: pct(r["recall_while_absorbing_ms"])),
        row(
            "ANN absorbed everything (s after the import began)",
            lambda r: _n(r["ann_absorbed_everything_s_after_import_start"], 1),
        ),
        row("erased records returned after a forget", lambda r: str(r["erased_records_returned_after_forget"])),
    ]
    commits = sorted({r["code"]["commit"] for _, r in runs})
    note = (
        f"`{SOURCES['ingest']}`: `{doc['command']}`, commit {', '.join(commits)}, {_when(doc)}, "
        f"load {doc['loadavg_at_start'][0]:.1f} → {doc['loadavg_at_end'][0]:.1f}; background compactor on.\n\n"
    )
    tail = (
        f"\nSQLite alone on the same host (`{SOURCES['sqlite_alone']}`, `bench/experiments/sqlite_alone.py`: "
        f"efface's schema and pragmas, nothing of efface around it, {_n(alone['records'])} records, 1,000 a "
        f"commit): {_n(alone['records_only_rps'])} records/s for the records table alone, "
        f"{_n(alone['with_claims_rps'])} with the claims, {_n(alone['with_claims_and_fts5_rps'])} with the "
        "claims and the FTS5 index.\n"
    )
    return note + _table(head, rows) + tail


def _erasure_doc() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], str]:
    doc = _load(SOURCES["erasure"])
    sizes = _sizes(doc)
    m = doc["machine"]
    note = (
        f"`{SOURCES['erasure']}`: `{doc['command']}`, commit {m['git_commit']}, {_when(doc)}, "
        f"{m['cpu_model']} {m['physical_cores']} cores, {m['ram_gib']} GiB, load {_load_avg(sizes)} "
        "(mean per size). Background compactor on, each store opened from a template copy.\n\n"
    )
    return doc, sizes, note


def erasure() -> str:
    _, sizes, note = _erasure_doc()

    def cls(s: dict[str, Any], n: int) -> dict[str, Any]:
        return s["erased_background"][f"records_{n}"]

    def pp(d: dict[str, float], nd: int = 3) -> str:
        return f"{d['p50']:.{nd}f} / {d['p99']:.{nd}f}"

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        (
            "`forget` until the receipt, 10 / 100 / 1,000 records, p50 (ms)",
            lambda s: " / ".join(_n(cls(s, n)["forget_ms"]["p50"]) for n in (10, 100, 1000)),
        ),
        (
            "ack → a read of an erased key comes back empty, p50 (ms)",
            lambda s: f"{s['unreadable']['ack_to_read_clean_ms']['p50']:.2f}",
        ),
        (
            "ack → a recall by an erased text comes back clean, p50 / p99 (ms)",
            lambda s: pp(s["unreadable"]["ack_to_recall_clean_ms"], 1),
        ),
        (
            "every read and recall after the ack clean",
            lambda s: (
                "yes" if s["unreadable"]["all_reads_clean"] and s["unreadable"]["all_recalls_clean"] else "**no**"
            ),
        ),
        ("ack → `erased`, 10 records, p50 (s)", lambda s: f"{cls(s, 10)['ack_to_erased_s']['p50']:.3f}"),
        ("**ack → `erased`, 100 records, p50 / p99 (s)**", lambda s: f"**{pp(cls(s, 100)['ack_to_erased_s'])}**"),
        (
            "… of which `wait` / `verify`, p50 (s)",
            lambda s: f"{cls(s, 100)['wait_returned_s']['p50']:.3f} / {cls(s, 100)['verify_s']['p50']:.3f}",
        ),
        ("ack → `erased`, 1,000 records, p50 (s)", lambda s: f"{cls(s, 1000)['ack_to_erased_s']['p50']:.3f}"),
        (
            "erasures timed (10 / 100 / 1,000 records); all reached `erased`",
            lambda s: (
                " / ".join(str(cls(s, n)["forgets"]) for n in (10, 100, 1000))
                + ("; yes" if all(cls(s, n)["all_reached_erased"] for n in (10, 100, 1000)) else "; **no**")
            ),
        ),
    ]
    return note + _rows_by_size(sizes, rows)


def verify_scan() -> str:
    _, sizes, note = _erasure_doc()

    def c100(s: dict[str, Any]) -> dict[str, Any]:
        return s["erased_background"]["records_100"]

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("`verify` after `wait`, 100 records, p50 (ms)", lambda s: _n(c100(s)["verify_s"]["p50"] * 1000)),
        (
            "… its byte check, p50 (ms), over the bytes it rescans (MB)",
            lambda s: f"{c100(s)['bytes_check_ms']['p50']:.0f} over {c100(s)['scanned_bytes'] / 1e6:,.0f}",
        ),
        ("… its byte scan, p50 (MB/s)", lambda s: _n(c100(s)["scan_MBps"]["p50"])),
        (
            "the scan alone over every file, warm / cold (MB/s)",
            lambda s: f"{_n(s['pure_scan']['warm']['MBps'])} / {_n(s['pure_scan']['cold']['MBps'])}",
        ),
        ("bytes in custody, every file (MB)", lambda s: _n(s["pure_scan"]["warm"]["bytes"] / 1e6)),
        (
            "verify's checks at the median, 100 records: probes by id / words / neighbours (ms)",
            lambda s: " / ".join(
                f"{s['erased_background']['verify_checks_ms_median_100'][k]:.1f}"
                for k in ("origin.by_id", "fts.by_text", "ann.by_neighbours")
            ),
        ),
        ("`verify` at the ack, before any `wait`: p50 (ms)", lambda s: _n(s["unreadable"]["verify_at_ack_ms"]["p50"])),
        (
            "store on disk before close (MiB) / peak RSS (MiB)",
            lambda s: f"{_n(s['disk_before_close']['total_mib'])} / {_n(s['peak_rss_mib'])}",
        ),
    ]
    return note + _rows_by_size(sizes, rows)


def extremes() -> str:
    doc = _load(SOURCES["extremes"])
    load = doc["load"]
    note = (
        f"`{SOURCES['extremes']}`: `bench/bench_extremes.py {' '.join(doc['argv'])}`, commit {doc['commit']}, "
        f"{doc['started_at'][:16].replace('T', ' ')} UTC, {doc['machine']}, load {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1 / 5 / 15 min, at the end). One record beside 200 others, each size and shape "
        "in its own process.\n\n"
    )
    head = [
        "shape",
        "bytes",
        "write (s)",
        "forget (s)",
        "ack → erased (s)",
        "ack → verified (s)",
        "level",
        "peak RSS before / after the forget (MiB)",
    ]
    rows = [
        [
            f"`{r['shape']}`",
            _n(r["bytes"]),
            f"{r['write_s']:.2f}",
            f"{r['forget_s']:.2f}",
            f"{r['ack_to_erased_s']:.2f}",
            f"{r['ack_to_verified_s']:.2f}",
            f"`{r['level']}`",
            f"{r['peak_rss_before_forget_mib']} / {r['peak_rss_mib']}",
        ]
        for r in doc["rows"]
    ]
    return note + _table(head, rows, right_from=1)


# -- PostgreSQL (bench/bench_postgres.py) -------------------------------------------------------------
_PG_SYSTEMS = (
    ("efface_postgres", "efface, PostgreSQL"),
    ("efface_sqlite", "efface, SQLite"),
    ("langgraph", "LangGraph"),
)


def _pg_note(rel: str, doc: dict[str, Any]) -> str:
    m, pg = doc["machine"], doc["postgres"]
    lg = doc.get("versions", {}).get("langgraph-checkpoint-postgres", "?")
    return (
        f"`{rel}`: `bench/bench_postgres.py {' '.join(doc['argv'])}`, commit {doc['commit']}, {_when(doc)}, "
        f"{m['cpu_model']} {m['cpus']} cores, {m['ram_gib']} GiB, load {doc['load_at_start'][0]:.1f} at the start, "
        f"{doc['load_during']['mean']:.1f} mean / {doc['load_during']['max']:.1f} max during; PostgreSQL "
        f"{pg['version'].split()[0]}, fsync {pg['settings']['fsync']}, synchronous_commit "
        f"{pg['settings']['synchronous_commit']}, shared_buffers {pg['settings']['shared_buffers']}; "
        f"langgraph-checkpoint-postgres {lg}.\n\n"
    )


def _p(d: dict[str, float] | None, nd: int = 1) -> str:
    return "–" if d is None else f"{d['p50']:,.{nd}f} / {d['p99']:,.{nd}f}"


def postgres() -> str:
    out = []
    for rel in SOURCES["postgres"]:
        doc = _load(rel)
        sy = doc["systems"]
        pg, sq = sy["efface_postgres"], sy["efface_sqlite"]
        lg = sy.get("langgraph")  # not run at 1M (its put alone would take hours here)
        ratio = pg["recall"]["latency_ms"]["p50"] / sq["recall"]["latency_ms"]["p50"]
        conc = pg["concurrent"]

        def unread(s: dict[str, Any], who: str, what: str) -> str:
            u = s["forget"].get(f"unreadable_{who}")
            return "–" if u is None else _p(u[what], 2)

        def levels(s: dict[str, Any]) -> str:
            lv = s["forget"]["levels_after_wait_verify"]
            return ", ".join(f"`{k}` {v}" for k, v in lv.items() if v)

        def clean(s: dict[str, Any]) -> str:
            us = [u for who in ("same", "second") if (u := s["forget"].get(f"unreadable_{who}"))]
            return "yes" if all(u["first_read_clean_all"] and u["first_recall_clean_all"] for u in us) else "**no**"

        rows = [
            [
                "`write_many` / `batch` of `PutOp`, 1,000 a call (records/s, embedding excluded)",
                _n(pg["write_many"]["records_per_s"]),
                _n(sq["write_many"]["records_per_s"]),
                _n(lg["put"]["records_per_s"]) if lg else "",
            ],
            [
                "first recall after the bulk write (s)",
                f"{pg['write_many']['first_recall_s']:.2f}",
                f"{sq['write_many']['first_recall_s']:.2f}",
                "–",
            ],
            [
                "recall / `search`, k=10, p50 / p99 (ms, query embedding included)",
                f"**{_p(pg['recall']['latency_ms'])}** ({ratio:.1f}× SQLite's p50)",
                f"**{_p(sq['recall']['latency_ms'])}**",
                f"{_p(lg['search']['latency_ms'])} (vectors only)" if lg else "",
            ],
            [
                "`forget` of a 100-record subject / `delete` of 100 items, p50 / p99 (ms)",
                _p(pg["forget"]["forget_ms"], 0),
                _p(sq["forget"]["forget_ms"], 0),
                _p(lg["delete"]["latency_ms"], 1) if lg else "",
            ],
            [
                "ack → a read of an erased key is empty, p50 / p99 (ms): same server",
                unread(pg, "same", "ack_to_read_clean_ms"),
                unread(sq, "same", "ack_to_read_clean_ms"),
                "–",
            ],
            ["… seen from a second server", unread(pg, "second", "ack_to_read_clean_ms"), "–", "–"],
            [
                "ack → a recall by an erased text is clean, p50 / p99 (ms): same server",
                unread(pg, "same", "ack_to_recall_clean_ms"),
                unread(sq, "same", "ack_to_recall_clean_ms"),
                "–",
            ],
            ["… seen from a second server", unread(pg, "second", "ack_to_recall_clean_ms"), "–", "–"],
            ["the first read and recall after every ack clean", clean(pg), clean(sq), "–"],
            [
                '`wait(until="erased")` + `verify`: levels reached',
                levels(pg),
                levels(sq),
                f"none: `delete` returns {lg['delete']['returns'].split(' ')[0]}" if lg else "",
            ],
            [
                "… ack → `verify`'s answer, p50 (s)",
                f"{pg['forget']['wait_s']['p50'] + pg['forget']['verify_s']['p50']:.3f}",
                f"{sq['forget']['ack_to_erased_s']['p50']:.3f}" if sq["forget"]["ack_to_erased_s"] else "–",
                "–",
            ],
            [
                "a second server: open / its first recall (s); its recall p50 / p99 (ms)",
                f"{pg['second_store']['open_s']:.2f} / {pg['second_store']['first_recall_s']:.2f}; "
                f"{_p(pg['second_store']['recall']['latency_ms'])}",
                "–",
                "–",
            ],
            [
                "1 / 2 processes writing at once: `write_many` (records/s, all processes)",
                f"{_n(conc['write_1']['records_per_s_total'])} / {_n(conc['write_2']['records_per_s_total'])}",
                "–",
                "–",
            ],
            [
                "1 / 2 processes recalling at once: p50 (ms); queries/s, all processes",
                f"{conc['recall_1']['latency_ms']['p50']:.1f} / {conc['recall_2']['latency_ms']['p50']:.1f}; "
                f"{_n(conc['recall_1']['queries_per_s_total'])} / {_n(conc['recall_2']['queries_per_s_total'])}",
                "–",
                "–",
            ],
            ["database size after the build (MiB)", _n(pg["database_mib"]), "–", _n(lg["database_mib"]) if lg else ""],
        ]
        if lg is None:
            for row in rows:
                row[3] = "not run"
        head = [f"{_n(doc['n'])} records, hashing vectors", *(label for _, label in _PG_SYSTEMS)]
        out.append(_pg_note(rel, doc) + _table(head, rows))
    return "\n".join(out)


def postgres_residue() -> str:
    rel = SOURCES["postgres_residue"]
    doc = _load(rel)
    sy = doc["systems"]

    def where(scan: dict[str, Any], what: str) -> str:
        """Where the needle is; for the vector, also its copy normalised again (HNSW, cosine), marked "(n)"."""
        kinds = [(what, "")] + (
            [("vector_normalised", " (n)")] if what == "vector" and what + "_normalised" in scan["base"] else []
        )
        rels = sorted({f"`{r}`{mark}" for k, mark in kinds for r in scan["base"][k]})
        segs = [f"{scan['wal_segments'][k]}{mark}" for k, mark in kinds if scan["wal_segments"][k]]
        parts = ([f"base/: {', '.join(rels)}"] if rels else []) + (
            [f"pg_wal/ segments: {' + '.join(segs)}"] if segs else []
        )
        return "; ".join(parts) or "nowhere"

    pr, lr = sy["efface_postgres"]["residue"], sy["langgraph"]["residue"]
    stages = [
        ("written, CHECKPOINT", pr["written"], lr["written"]),
        ("forgotten (`wait` + `verify`) / deleted, CHECKPOINT", pr["forgotten_waited"], lr["deleted"]),
        ("+ `VACUUM` + CHECKPOINT", pr["vacuumed"], lr["vacuumed"]),
    ]
    rows = [
        [stage, where(p, "text"), where(p, "vector"), where(lg, "text"), where(lg, "vector")] for stage, p, lg in stages
    ]
    head = [
        "one marked record among the others",
        "efface: its text",
        "efface: its vector",
        "LangGraph: its text",
        "LangGraph: its vector",
    ]
    note = (
        f"`{rel}` (as above), {_n(doc['n'])} records: the marked record's unique word and its vector's "
        "first 32 bytes (as written, and "
        "as pgvector's HNSW index for cosine distance keeps them, normalised again: marked (n), where the run "
        "looked for them), searched in "
        f"`base/<database>` (by relation) and `pg_wal/` with `bench/experiments/pg_residue.py`'s scanners; "
        f"efface's marked subject reached `{pr['marker_level']}`.\n\n"
    )
    return note + _table(head, rows, right_from=len(head))


def postgres_quality() -> str:
    rel = SOURCES["postgres_quality"]
    doc = _load(rel)
    runs = doc["quality"]["runs"]
    head = [
        "MiniLM vectors: recall@1 / recall@10 / MRR@10; p50 / p99 (ms)",
        *(f"{r['corpus']} ({_n(r['docs'])} documents, {_n(r['queries'])} queries)" for r in runs),
    ]

    def cell(r: dict[str, Any], key: str) -> str:
        m = r["systems"][key]
        return f"{m['recall@1']:.3f} / {m['recall@10']:.3f} / {m['mrr@10']:.3f}; {m['p50_ms']:.1f} / {m['p99_ms']:.1f}"

    labels = (
        ("efface_postgres", "efface on PostgreSQL (recall)"),
        ("efface_sqlite", "efface on SQLite (recall)"),
        ("langgraph", "LangGraph `PostgresStore` (`search`, HNSW)"),
    )
    rows = [[label, *(cell(r, key) for r in runs)] for key, label in labels]
    return _pg_note(rel, doc) + _table(head, rows, right_from=len(head))


TABLES: dict[str, Callable[[], str]] = {
    "quality": quality,
    "recall-latency": recall_latency,
    "store": store,
    "ingest": ingest,
    "erasure": erasure,
    "verify-scan": verify_scan,
    "extremes": extremes,
    "postgres": postgres,
    "postgres-residue": postgres_residue,
    "postgres-quality": postgres_quality,
}


# -- the document ----------------------------------------------------------------------------------
def render(text: str) -> str:
    """``text`` with every generated table replaced by what the result files give now."""
    return _BLOCK.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + m.group(4), text)


def problems(text: str) -> list[str]:
    """What is wrong with the document's generated tables: missing, unknown, or not what the files give."""
    found = [m.group("name") for m in _BLOCK.finditer(text)]
    out = [f"table {name!r} is not in the document" for name in TABLES if name not in found]
    out += [f"table {name!r} in the document is not one this script prints" for name in found if name not in TABLES]
    out += [
        f"table {m.group('name')!r} differs from the result files (run bench/tables/current.py --write)"
        for m in _BLOCK.finditer(text)
        if m.group("name") in TABLES and m.group("body") != TABLES[m.group("name")]()
    ]
    return out


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        DOC.write_text(render(DOC.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if argv == ["--check"]:
        wrong = problems(DOC.read_text(encoding="utf-8"))
        print("\n".join(wrong) or "docs/benchmarks.md matches bench/results/")
        return 1 if wrong else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name, fn in TABLES.items():
        print(f"<!-- table: {name} -->\n{fn()}<!-- /table -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
