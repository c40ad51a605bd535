r"""Rendering for people: the tables the commands print, shared with ``efface demo``.

Everything here takes the ``to_dict()`` forms and a rich ``Console``; nothing here parses
options or opens a store, and nothing here imports the commands (:mod:`.app`) or the demo,
which both import it. Keys, texts and other data go into ``Text`` cells through :func:`data`,
never into markup: a stored value can hold terminal escape sequences (ESC, CSI, OSC, BEL and
the other C0 and C1 controls, bidirectional overrides), and printed raw they would drive the
reader's terminal (retitle it, clear it, hide or reorder text). :func:`data` shows them as
escapes instead (``\x1b``, ``\u202e``). ``--json`` output is for programs: JSON escapes the
C0 controls itself, and a program reads the rest as the characters they are.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_ESCAPED = {
    cp: f"\\x{cp:02x}" for cp in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
}  # every C0 control but tab and newline, DEL, every C1 control (0x9b is a one-byte CSI)
_ESCAPED.update(
    {cp: f"\\u{cp:04x}" for cp in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)  # bidirectional marks, embeddings, overrides and isolates: they reorder what the reader sees


def shown(value: Any) -> str:
    """``str(value)`` safe for a terminal: control characters and bidi overrides as escapes."""
    return str(value).translate(_ESCAPED)


def data(value: Any, style: str = "") -> Text:
    """A value for a table cell, a title or a line: shown as data (never markup), escaped."""
    return Text(shown(value), style=style)


def console() -> Console:
    """A console on the current stdout (CliRunner swaps it), without guessing markup in data."""
    return Console(file=sys.stdout, highlight=False, emoji=False)


def fmt_time(ts: float | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS UTC`` (``never`` for None)."""
    if ts is None:
        return "never"
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a ttl of timedelta.max: past the calendar's end
        return "after 9999-12-31" if ts > 0 else "before 0001-01-01"


def kv_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of ``(field, value)`` rows; values are shown as data."""
    table = Table(title=data(title), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(data(name), data(value))
    return table


def paths_table(paths: dict, title: str = "Read paths") -> Table:
    """``paths`` in the to_dict() form: name -> {state, applied_epoch, max_propagation_s, read_safe}."""
    table = Table(title=title, title_justify="left")
    for col in ("path", "state", "applied epoch", "erased epoch", "max propagation", "measured", "read-safe"):
        table.add_column(col)
    for name, p in paths.items():
        style = "green" if p["state"] in ("absorbed", "shredded") else "yellow" if p.get("read_safe", True) else "red"
        measured = p.get("measured_propagation_s")
        table.add_row(
            data(name),
            data(p["state"], style),
            data(p["applied_epoch"]),
            data(p.get("erased_epoch", "-")),
            f"{p['max_propagation_s']:g} s",
            "-" if measured is None else f"{measured:.3f} s",
            "yes" if p.get("read_safe", True) else "NO",
        )
    return table


def copies_table(copies: dict, title: str = "Copies") -> Table:
    """``copies`` in the to_dict() form: name -> {state, reason, checked_at}."""
    table = Table(title=title, title_justify="left")
    for col in ("copy", "state", "checked", "why"):
        table.add_column(col, overflow="fold")
    for name, c in copies.items():
        style = {"erased": "green", "shredded": "green", "present": "red", "cannot_verify": "red"}.get(
            c["state"], "yellow"
        )
        checked = c.get("checked_at")
        table.add_row(
            data(name), data(c["state"], style), "-" if checked is None else fmt_time(checked), data(c["reason"])
        )
    return table


def _listing(keys: list[str], limit: int = 20) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" … and {len(keys) - limit} more" if len(keys) > limit else "")


def render_receipt(out: Console, r: dict, title: str | None = None) -> None:
    """A receipt (Receipt.to_dict()) as tables: the summary, its read paths, what stays and why."""
    out.print(
        kv_table(
            title or f"Receipt {r['handle']}",
            [
                ("handle", r["handle"]),
                ("epoch", r["epoch"]),
                ("kind", r["kind"]),
                ("level", r["level"]),
                ("released", f"{len(r['released'])} claim(s)"),
                ("erased", f"{len(r['erased'])} record(s)" + (f": {_listing(r['erased'])}" if r["erased"] else "")),
                ("retained", f"{len(r['retained'])} record(s)"),
                (
                    "quarantined",
                    f"{len(r['quarantined'])} record(s)"
                    + (f": {_listing(r['quarantined'])}" if r["quarantined"] else ""),
                ),
                ("max propagation", f"{r['max_propagation_s']:g} s"),
                ("acknowledged", fmt_time(r["acknowledged_at"])),
                ("ledger", f"seq {r['ledger_seq']}, hash {r['ledger_hash'][:16]}…"),
            ],
        )
    )
    out.print(paths_table(r["paths"], "Read paths at acknowledgement"))
    if r.get("copies"):
        out.print(copies_table(r["copies"], "Copies at acknowledgement"))
    if r["retained"]:
        table = Table(title="Retained (the selector matched them; another claim keeps them)", title_justify="left")
        for col in ("key", "purpose", "basis", "until", "why"):
            table.add_column(col, overflow="fold")
        for x in r["retained"]:
            table.add_row(
                data(x["key"]), data(x["purpose"]), data(x["basis"]), fmt_time(x["expires_at"]), data(x["reason"])
            )
        out.print(table)
    if r.get("derivations"):
        table = Table(title=data(f"Derived records (tenant policy: {r['policy']})"), title_justify="left")
        for col in ("key", "why", "action", "detail"):
            table.add_column(col, overflow="fold")
        for d in r["derivations"]:
            table.add_row(data(d["key"]), data(d["why"]), data(d["action"]), data(d["detail"]))
        out.print(table)


def render_status(out: Console, s: dict) -> None:
    """A status (Status.to_dict()) as tables."""
    counts = s["counts"]
    out.print(
        kv_table(
            f"Erasure {s['handle']}",
            [
                ("epoch", s["epoch"]),
                ("kind", s["kind"]),
                ("level", s["level"]),
                ("settled (read paths absorbed)", "yes" if s["settled"] else "no"),
                ("erased (bytes gone from every file)", "yes" if s.get("erased") else "no"),
                ("pending deletions", s["pending_deletions"]),
                (
                    "released / erased / retained / quarantined",
                    f"{counts['released']} / {counts['erased']} / {counts['retained']} / {counts['quarantined']}",
                ),
                ("max propagation", f"{s['max_propagation_s']:g} s"),
                ("acknowledged", fmt_time(s["acknowledged_at"])),
            ],
        )
    )
    out.print(paths_table(s["paths"]))
    if s.get("copies"):
        out.print(copies_table(s["copies"]))
    for alarm in s.get("alarms", []):
        out.print(data(f"ALARM {alarm}", style="bold red"))


def hits_table(hits) -> Table:
    """Recall hits (model objects), best first."""
    table = Table(title=f"{len(hits)} hit(s)", title_justify="left")
    for col in ("#", "key", "score", "via", "text"):
        table.add_column(col, overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), data(h.key), f"{h.score:.4f}", data("+".join(h.via)), data(h.text))
        for turn in h.window:  # recall --window: the hit's neighbouring turns, under it
            table.add_row("", data(turn.key), "", "window", data(turn.text))
    return table


def receipts_table(rows: list[dict]) -> Table:
    """Stored receipts (``Store.receipts()`` rows, as kept), one line each."""
    table = Table(
        title=f"{len(rows)} receipt(s)",
        title_justify="left",
        box=None,
        pad_edge=False,
        caption="counts: released / erased / retained / quarantined; times in UTC",
        caption_justify="left",
    )
    table.add_column("handle", no_wrap=True, min_width=28)
    for col in ("epoch", "kind", "level", "counts", "acknowledged"):
        table.add_column(col, no_wrap=True)
    for row in rows:
        b = row["body"]
        counts = "/".join(str(len(b[f])) for f in ("released", "erased", "retained", "quarantined"))
        table.add_row(
            data(row["handle"]),
            data(row["epoch"]),
            data(row["kind"]),
            data(b["level"]),
            counts,
            fmt_time(b["acknowledged_at"])[:16],
        )
    return table


def ledger_table(entries: list[dict]) -> Table:
    """Ledger entries (``Store.ledger()``), oldest first."""
    table = Table(title=f"{len(entries)} ledger entr{'y' if len(entries) == 1 else 'ies'}", title_justify="left")
    for col in ("seq", "at", "kind", "handle", "hash"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(
            data(e["seq"]), fmt_time(e["at"]), data(e["kind"]), data(e["handle"] or "-"), data(e["hash"][:16] + "…")
        )
    return table


def render_verification(out: Console, v) -> None:
    """A verification (the model object ``Store.verify`` returns): the level, then each check."""
    colour = {"erased": "green", "unreadable": "yellow"}.get(v.level, "red")
    out.print(
        Text.assemble(
            "level: ",
            data(v.level, colour),
            data(f" (receipt level {v.receipt_level}; ledger seq {v.ledger_seq})"),
        )
    )
    table = Table(box=None, pad_edge=False)
    for col in ("check", "rung", "outcome", "evidence"):
        table.add_column(col, overflow="fold")
    for c in v.checks:
        style = {"pass": "green", "recorded": "cyan"}.get(c.outcome, "red")
        table.add_row(data(c.name), data(c.rung), data(c.outcome, style), data(c.detail))
    out.print(table)
    if v.copies:
        out.print(copies_table({k: c.to_dict() for k, c in v.copies.items()}))


def quarantine_table(items: list[dict]) -> Table:
    """Quarantined records (their ``to_dict()`` forms): why, since when, what survives."""
    table = Table(title=f"{len(items)} quarantined record(s)", title_justify="left")
    for col in ("key", "why", "since", "surviving sources", "erasure"):
        table.add_column(col, overflow="fold")
    for i in items:
        table.add_row(
            data(i["key"]),
            data(i["why"]),
            fmt_time(i["since"]),
            data(", ".join(i["surviving_sources"]) or "-"),
            data(i["handle"]),
        )
    return table
