#!/usr/bin/env python
"""Markdown tables from bench_concurrency.py's JSON:

python bench/tables/table_concurrency.py [bench/results/results-concurrency.json]
"""

from __future__ import annotations

import json
import os
import sys

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
LABEL = {
    "idle": "idle",
    "verify": "during `verify()`",
    "compaction": "during `compact()` (after a forget)",
    "backup": "during `backup()`",
}


def cell(c: dict | None) -> str:
    if not c or not c.get("recall_ms"):
        return "—"
    r = c["recall_ms"]
    return f"{r['p50']:,.1f} / {r['p99']:,.1f} (n={r['n']:,})"


def main(path: str) -> None:
    with open(path) as f:
        d = json.load(f)
    conds = d["conditions"]
    threads = list(next(iter(conds.values()))["threads"])
    m = d["machine"]
    print(
        f"{d['records']:,} records, commit {d['commit'][:7]}, {d['started_at']}, {m['logical_cores']} cores, "
        f"Python {m['python']}, SQLite {m['sqlite']}, usearch {m['usearch']}; "
        f"cells of {d['params'].get('idle_duration_s')} s idle, {d['params'].get('maintenance_duration_s')} s "
        f"under maintenance\n"
    )
    print(
        "| recall k=10, p50 / p99 (ms) | "
        + " | ".join(f"{t} thread{'s' if t != '1' else ''}" for t in threads)
        + " | recalls/s ("
        + " / ".join(threads)
        + " threads) | maintenance calls, p50 (s) | load before → after |"
    )
    print("|---|" + "---:|" * len(threads) + "---:|---:|---|")
    for name, c in conds.items():
        cells = [c["threads"].get(t) for t in threads]
        rps = " / ".join(
            f"{x['recalls_per_s']:,.1f}" if x and x.get("recalls_per_s") is not None else "—" for x in cells
        )
        calls = [x["maintenance"] for x in cells if x and "maintenance" in x]
        mcol = (
            (
                ", ".join(f"{a['calls']}" for a in calls)
                + "; "
                + " / ".join(f"{a['call_s']['p50']:.2f}" if a.get("call_s") else "—" for a in calls)
            )
            if calls
            else "—"
        )
        lb, la = c["loadavg_before"], c["loadavg_after"]
        print(
            f"| {LABEL.get(name, name)} | "
            + " | ".join(cell(x) for x in cells)
            + f" | {rps} | {mcol} | {lb[0]:.2f} → {la[0]:.2f} |"
        )
    if any("recall_ms_whole_window" in x for c in conds.values() for x in c["threads"].values()):
        print("\n| every recall of the cell, p50 / p99 (ms) | " + " | ".join(threads) + " threads |")
        print("|---|" + "---:|" * len(threads))
        for name, c in conds.items():
            vals = []
            for t in threads:
                w = (c["threads"].get(t) or {}).get("recall_ms_whole_window")
                vals.append(f"{w['p50']:,.1f} / {w['p99']:,.1f}" if w else "—")
            print(f"| {LABEL.get(name, name)} | " + " | ".join(vals) + " |")
    print("\n| target | condition | threads | measured | threshold | met |")
    print("|---|---|---:|---:|---:|---|")
    for t in d["targets"]:
        extra = f" ({t['p99_ms']:,.1f} vs {t['idle_p99_ms']:,.1f} ms)" if "p99_ms" in t else ""
        print(
            f"| {t['what']} | {t['condition']} | {t['threads']} | {t['value']:,.2f}{extra} | {t['threshold']} | "
            f"{'yes' if t['pass'] else '**no**'} |"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(RESULTS, "results-concurrency.json"))
