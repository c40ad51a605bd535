#!/usr/bin/env python
"""Markdown tables from bench_erasure.py's JSON:

python bench/tables/table_erasure.py bench/results/results-erasure.json
"""

from __future__ import annotations

import json
import os
import sys

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def f(x, nd=2):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def p(d, key="p50", scale=1.0, nd=2):
    if not d:
        return "—"
    return f(d[key] * scale, nd)


def main(path: str) -> None:
    with open(path) as fh:
        doc = json.load(fh)
    sizes = {k: v for k, v in sorted(doc["sizes"].items(), key=lambda kv: int(kv[0])) if "error" not in v}
    cols = list(sizes)
    head = "| | " + " | ".join(f"{int(c):,} records" for c in cols) + " |\n|---|" + "---:|" * len(cols)

    def row(label, fn):
        vals = []
        for c in cols:
            try:
                vals.append(fn(sizes[c]))
            except (KeyError, TypeError, IndexError):
                vals.append("—")
        print(f"| {label} | " + " | ".join(vals) + " |")

    if any("measured_on" in sizes[c] for c in cols):
        print("### Code measured\n")
        print(head)
        row(
            "commit (src last changed in)",
            lambda r: f"{r['measured_on']['git_commit']} ({r['measured_on']['src_last_changed_in']})",
        )
        print()
    print("### forget → unreadable\n")
    print(head)
    u = lambda r: r["unreadable"]  # noqa: E731
    row("forgets probed (100-record subjects)", lambda r: f(u(r)["forgets"]))
    row("read of an erased key right after ack: clean", lambda r: "all" if u(r)["all_reads_clean"] else "**NO**")
    row("recall of an erased text right after ack: clean", lambda r: "all" if u(r)["all_recalls_clean"] else "**NO**")
    row(
        "ack → first read back clean, p50 / p99 (ms)",
        lambda r: f"{p(u(r)['ack_to_read_clean_ms'])} / {p(u(r)['ack_to_read_clean_ms'], 'p99')}",
    )
    row(
        "ack → first recall back clean, p50 / p99 (ms)",
        lambda r: f"{p(u(r)['ack_to_recall_clean_ms'])} / {p(u(r)['ack_to_recall_clean_ms'], 'p99')}",
    )
    row(
        "verify() at once after forget: levels",
        lambda r: ", ".join(
            f"{n}× {lv}"
            for lv, n in sorted(
                {lv: u(r)["verify_at_ack_levels"].count(lv) for lv in set(u(r)["verify_at_ack_levels"])}.items()
            )
        ),
    )
    row(
        "… its duration p50 / p99 (s)",
        lambda r: f"{p(u(r)['verify_at_ack_ms'], scale=1e-3)} / {p(u(r)['verify_at_ack_ms'], 'p99', 1e-3)}",
    )

    print("\n### forget → erased, background compactor on (100-record subjects)\n")
    print(head)
    e = lambda r: r["erased_background"]["records_100"]  # noqa: E731
    row("forgets", lambda r: f(e(r)["forgets"]))
    row(
        "verify level reached: erased / unreadable",
        lambda r: f"{e(r)['levels']['erased']} / {e(r)['levels']['unreadable']}",
    )
    row(
        "structural erased checks (ANN saved, FTS merged, WAL checkpointed) all pass",
        lambda r: "yes" if e(r)["structural_checks_all_pass"] else "**no**",
    )
    row(
        "ack → wait(until='erased') returns, p50 / p99 (s)",
        lambda r: f"{p(e(r)['wait_returned_s'])} / {p(e(r)['wait_returned_s'], 'p99')}",
    )
    row("verify() after it, p50 / p99 (s)", lambda r: f"{p(e(r)['verify_s'])} / {p(e(r)['verify_s'], 'p99')}")
    row("… of which the byte scan ('bytes' check), p50 (s)", lambda r: p(e(r)["bytes_check_ms"], scale=1e-3))
    row(
        "ack → verify's verdict, p50 / p99 (s)",
        lambda r: f"{p(e(r)['ack_to_verdict_s'])} / {p(e(r)['ack_to_verdict_s'], 'p99')}",
    )
    row(
        "ack → verify says erased (only those that did), p50 / p99 (s)",
        lambda r: (
            f"{p(e(r)['ack_to_erased_s'])} / {p(e(r)['ack_to_erased_s'], 'p99')}" if e(r)["ack_to_erased_s"] else "—"
        ),
    )
    row("byte scan throughput in verify, p50 (MB/s)", lambda r: p(e(r)["scan_MBps"], nd=0))
    row("bytes scanned per verify (MB)", lambda r: f(e(r)["scanned_bytes"] / 1e6, 1))
    row("forget() itself, p50 (ms)", lambda r: p(e(r)["forget_ms"], nd=1))

    print("\n### Where the time goes: fixed erasure (100 records), store size grows (background=False, medians, ms)\n")
    print(head)
    b = lambda r, k="records_100": r["breakdown"]["summary"][k]  # noqa: E731
    for part in ("forget", "ann_catch_up", "fts_optimize", "ann_save_fsync", "prune_changes", "wal_checkpoint"):
        row(part, lambda r, part=part: f(b(r)["parts_ms_median"][part], 1))
    row("**physical erasure (sum of the five above)**", lambda r: f(b(r)["physical_erasure_ms_median"], 1))
    row("verify() total", lambda r: f(b(r)["parts_ms_median"]["verify"], 1))
    for c in ("origin.by_id", "fts.by_text", "ann.by_neighbours", "ann.erased", "fts.erased", "origin.wal", "bytes"):
        row(f"… verify check {c}", lambda r, c=c: f(b(r)["verify_checks_ms_median"].get(c), 1))
    row("store on disk (MiB)", lambda r: f(r["disk_after"]["total_mib"], 1))

    for c in cols:
        r = sizes[c]
        print(
            f"\n### Fixed store ({int(c):,} records), erasure of 10 / 100 / 1000 records "
            "(background=False, medians, ms)\n"
        )
        ks = [k for k in ("records_10", "records_100", "records_1000") if k in r["breakdown"]["summary"]]
        print("| | " + " | ".join(k.replace("records_", "") + " records" for k in ks) + " |\n|---|" + "---:|" * len(ks))

        def row2(label, fn):
            vals = []
            for k in ks:
                try:
                    vals.append(fn(r["breakdown"]["summary"][k], k))
                except (KeyError, TypeError):
                    vals.append("—")
            print(f"| {label} | " + " | ".join(vals) + " |")

        for part in ("forget", "ann_catch_up", "fts_optimize", "ann_save_fsync", "wal_checkpoint"):
            row2(part, lambda s, k, part=part: f(s["parts_ms_median"][part], 1))
        row2("**physical erasure**", lambda s, k: f(s["physical_erasure_ms_median"], 1))
        row2("verify() total", lambda s, k: f(s["parts_ms_median"]["verify"], 1))
        for ch in ("fts.by_text", "ann.by_neighbours", "bytes"):
            row2(f"… {ch}", lambda s, k, ch=ch: f(s["verify_checks_ms_median"].get(ch), 1))
        row2("verify levels", lambda s, k: ", ".join(s["levels"]))
        row2("compactor on: ack → verdict p50 (s)", lambda s, k: p(r["erased_background"][k]["ack_to_verdict_s"]))
        row2(
            "compactor on: reached erased",
            lambda s, k: f"{r['erased_background'][k]['levels']['erased']} of {r['erased_background'][k]['forgets']}",
        )

    print("\n### Byte-scan throughput\n")
    print(head)
    row("verify's 'bytes' check, p50 (MB/s)", lambda r: p(r["erased_background"]["records_100"]["scan_MBps"], nd=0))
    row("Fingerprinter.scan alone, page cache warm (MB/s)", lambda r: f(r["pure_scan"]["warm_again"]["MBps"], 0))
    row("Fingerprinter.scan alone, after fadvise DONTNEED (MB/s)", lambda r: f(r["pure_scan"]["cold"]["MBps"], 0))
    row("bytes scanned (MB)", lambda r: f(r["pure_scan"]["warm"]["bytes"] / 1e6, 1))

    print("\n### Run\n")
    print(head)
    row(
        "build: write_many (s) / ANN absorb (s)",
        lambda r: f"{f(r['build']['write_many_s'], 1)} / {f(r['build']['first_recall_ann_absorb_s'], 1)}",
    )
    row("peak RSS (MiB)", lambda r: f(r["peak_rss_mib"], 0))
    row(
        "1-min load average during the size (mean / max)",
        lambda r: f"{f(r['loadavg_1min_during']['mean'])} / {f(r['loadavg_1min_during']['max'])}",
    )
    row("wall time of the size (s)", lambda r: f(r["wall_s"], 0))

    print("\n### Targets\n")
    print("| target | size | measured | threshold | met |\n|---|---:|---:|---:|---|")
    for t in doc.get("targets", []):
        met = {True: "yes", False: "**no**", None: "not measured"}[t["pass"]]
        print(
            f"| {t['what']} | {t['size']:,} | {f(t['value'])} | {t['threshold']} | {met}"
            + (f" — {t['note']}" if t.get("note") else "")
            + " |"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(RESULTS, "results-erasure.json"))
