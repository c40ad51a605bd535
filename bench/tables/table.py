#!/usr/bin/env python
"""Print the Markdown tables of docs/benchmarks-history.md from a bench_store.py result.

python bench/tables/table.py bench/results/results-store.json
"""

from __future__ import annotations

import json
import os
import sys

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def main(path: str) -> None:
    with open(path) as fh:
        d = json.load(fh)
    sizes = list(d["sizes"])
    rows = []

    def row(label, fn, fmt="{:,.1f}"):
        cells = []
        for n in sizes:
            try:
                v = fn(d["sizes"][n])
                cells.append(fmt.format(v) if not isinstance(v, str) else v)
            except (KeyError, TypeError):
                cells.append("–")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    row(
        "write_many, batches of 1000 (records/s, embedding excluded)",
        lambda r: r["batched_write"]["records_per_s"],
        "{:,.0f}",
    )
    row(
        "… first 10 % / last 10 % of batches (records/s)",
        lambda r: (
            f"{r['batched_write']['first_10pct_records_per_s']:,.0f} / "
            f"{r['batched_write']['last_10pct_records_per_s']:,.0f}"
        ),
    )
    row(
        "first recall after the bulk write (s; ANN absorbs the import)",
        lambda r: r["after_build"]["first_recall_s"],
        "{:,.2f}",
    )
    row(
        "ingest until recallable by meaning (records/s)",
        lambda r: r["after_build"]["ingest_until_recallable_records_per_s"],
        "{:,.0f}",
    )
    row("single durable write, 1 record/call (records/s)", lambda r: r["single_write"]["records_per_s"], "{:,.0f}")
    row(
        "… its latency p50 / p99 (ms)",
        lambda r: f"{r['single_write']['latency_ms']['p50']:.2f} / {r['single_write']['latency_ms']['p99']:.2f}",
    )
    row(
        "recall k=10 p50 / p99 (ms, query embedding included)",
        lambda r: f"{r['recall']['latency_ms']['p50']:.1f} / {r['recall']['latency_ms']['p99']:.1f}",
    )
    row(
        "… record-word queries p50 / random-word queries p50 (ms)",
        lambda r: (
            f"{r['recall']['latency_ms_record_word_queries']['p50']:.1f} / "
            f"{r['recall']['latency_ms_random_word_queries']['p50']:.1f}"
        ),
    )
    row(
        "… of which query embedding p50 / p99 (ms)",
        lambda r: f"{r['recall']['query_embedding_ms']['p50']:.3f} / {r['recall']['query_embedding_ms']['p99']:.3f}",
    )
    row(
        "forget one subject = 100 records, p50 / p99 (ms)",
        lambda r: f"{r['forget']['latency_ms']['p50']:.1f} / {r['forget']['latency_ms']['p99']:.1f}",
    )
    row(
        "wait() after that forget, p50 / p99 (ms)",
        lambda r: f"{r['forget']['wait_ms']['p50']:.1f} / {r['forget']['wait_ms']['p99']:.1f}",
    )
    row("peak RSS of the run (MiB; incl. ~46 interpreter + corpus)", lambda r: r["peak_rss_mib"])
    row("RSS at the end, corpus freed (MiB)", lambda r: r["rss_mib_end"])
    row("store on disk after close (MiB): total", lambda r: r["disk_after_close"]["total_mib"])
    row(
        "… origin.db / ANN files (MiB)",
        lambda r: f"{r['disk_after_close']['origin.db_mib']:.1f} / {r['disk_after_close']['ann/*.usearch_mib']:.1f}",
    )
    row(
        "1-min load average during the run (mean / max)",
        lambda r: f"{r['loadavg_1min_during']['mean']:.2f} / {r['loadavg_1min_during']['max']:.2f}",
    )
    print("| | " + " | ".join(f"{int(n):,} records" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    print("\n".join(rows))

    aq = d.get("ann_quality", {})
    if aq and "skipped" not in aq:
        print("\n| ANN, hashing-384 vectors | " + " | ".join(f"{int(n):,}" for n in aq) + " |")
        print("|---|" + "---:|" * len(aq))
        dt = next(iter(aq.values()))["params"]["efface_dtype"]
        for label, fn in (
            (
                f"{dt} recall@10 vs exact (all / record-word / random-word queries)",
                lambda a: (
                    f"{a[dt]['recall_at_10_vs_exact']:.2f} / {a[dt]['recall_at_10_record_word_queries']:.2f} / "
                    f"{a[dt]['recall_at_10_random_word_queries']:.2f}"
                ),
            ),
            (
                "f32 recall@10 vs exact (same split)",
                lambda a: (
                    f"{a['f32']['recall_at_10_vs_exact']:.2f} / "
                    f"{a['f32']['recall_at_10_record_word_queries']:.2f} / "
                    f"{a['f32']['recall_at_10_random_word_queries']:.2f}"
                ),
            ),
            (
                f"{dt} recall@10 at expansion_search 64 / 256 / 1024",
                lambda a: " / ".join(
                    f"{a[dt]['expansion_search_sweep'][e]['recall_at_10']:.2f}" for e in ("64", "256", "1024")
                ),
            ),
            (
                f"{dt} / f32 insert rate (vectors/s)",
                lambda a: f"{a[dt]['insert_vectors_per_s']:,.0f} / {a['f32']['insert_vectors_per_s']:,.0f}",
            ),
            (f"{dt} / f32 index memory (MiB)", lambda a: f"{a[dt]['memory_mib']:.0f} / {a['f32']['memory_mib']:.0f}"),
        ):
            print(f"| {label} | " + " | ".join(fn(a) for a in aq.values()) + " |")

    m = d.get("minilm", {})
    if "sentences_per_s" in m:
        print(
            f"\nMiniLM: {m['sentences_per_s']:.1f} sentences/s (median of {len(m['runs_s'])} runs, best "
            f"{m['sentences_per_s_best']:.1f}), batch {m['batch_size']}, {m['sentences']} sentences of "
            f"~{m['avg_sentence_chars']:.0f} chars, {m['torch_threads']} torch threads; model load "
            f"{m['model_load_s']:.1f} s; one sentence alone {m['single_sentence_embed_ms']:.0f} ms; "
            f"peak RSS {m['peak_rss_mib']:.0f} MiB"
        )

    print("\n| target | size | measured | threshold | met |\n|---|---:|---:|---:|---|")
    for t in d["targets"]:
        met = {True: "yes", False: "**no**", None: "not run"}[t["pass"]]
        val = "–" if t["value"] is None else f"{t['value']:,.1f}"
        print(f"| {t['what']} | {t['size']:,} | {val} | {t['threshold']} | {met} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(RESULTS, "results-store.json"))
