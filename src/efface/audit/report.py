"""Render an :class:`~efface.audit.model.AuditReport`: rich tables, JSON, or one HTML page.

Every renderer shows only what the report holds: levels, counts, file names, versions."""

from __future__ import annotations

import datetime as _dt
import html
import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .model import AuditReport

_STYLE = {"intent": "red", "unreadable": "yellow", "erased": "green"}


def to_json(report: AuditReport) -> str:
    """The report as one JSON document."""
    return json.dumps(report.to_dict(), ensure_ascii=False, indent=2)


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render(out: Console, report: AuditReport) -> None:
    """Tables for people: the summary, then one table per stage."""
    head = Table(show_header=False, title=Text(f"efface audit: {report.kind}"), title_justify="left")
    head.add_column("field", style="bold")
    head.add_column("value", overflow="fold")
    for k, v in (
        ("library", report.library),
        ("collection", report.collection),
        ("ran on", "the original (--in-place)" if report.in_place else "a copy (removed afterwards)"),
        ("started", _when(report.started_at)),
        ("targets", f"{report.targets} record(s)"),
        (
            "detectable in bytes before the delete",
            f"{report.detectable_texts} text(s), {report.detectable_vectors} vector(s)",
        ),
        ("delete returned", report.delete_returned),
        ("overall", report.overall),
    ):
        head.add_row(k, Text(str(v), style=_STYLE.get(str(v), "")))
    out.print(head)
    for stage in report.stages:
        t = Table(
            title=Text(f"after {stage.name}: {stage.level}"),
            title_justify="left",
            caption=Text("; ".join(stage.calls) or "no call"),
            caption_justify="left",
        )
        for col in ("read path", "level", "evidence"):
            t.add_column(col, overflow="fold")
        for c in stage.cells:
            t.add_row(c.path, Text(c.level, style=_STYLE[c.level]), Text(c.evidence))
        out.print(t)
    for note in report.notes:
        out.print(Text(f"note: {note}"))


def to_html(report: AuditReport) -> str:
    """A self-contained HTML page."""
    e = html.escape
    colour = {"intent": "#c62828", "unreadable": "#b26a00", "erased": "#2e7d32"}

    def badge(level: str) -> str:
        return f'<b style="color:{colour[level]}">{e(level)}</b>'

    rows = [
        ("library", e(report.library)),
        ("collection", e(report.collection)),
        ("ran on", "the original (--in-place)" if report.in_place else "a copy (removed afterwards)"),
        ("started", e(_when(report.started_at))),
        ("targets", str(report.targets)),
        (
            "detectable in bytes before the delete",
            f"{report.detectable_texts} text(s), {report.detectable_vectors} vector(s)",
        ),
        ("delete returned", f"<code>{e(report.delete_returned)}</code>"),
        ("overall", badge(report.overall)),
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>efface audit: {e(report.kind)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;"
        "text-align:left;vertical-align:top}</style></head><body>",
        f"<h1>efface audit: {e(report.kind)} — {badge(report.overall)}</h1><table>",
        *(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows),
        "</table>",
    ]
    for stage in report.stages:
        parts.append(f"<h2>After {e(stage.name)}: {badge(stage.level)}</h2>")
        parts.append(f"<p>Calls: {e('; '.join(stage.calls) or 'none')} ({stage.seconds:.3f} s)</p>")
        parts.append("<table><tr><th>read path</th><th>level</th><th>evidence</th></tr>")
        parts += [
            f"<tr><td>{e(c.path)}</td><td>{badge(c.level)}</td><td>{e(c.evidence)}</td></tr>" for c in stage.cells
        ]
        parts.append("</table>")
    parts += [f"<p>Note: {e(n)}</p>" for n in report.notes]
    parts.append(
        "<p>Levels (docs/concepts.md §3): <b>intent</b> — a read path still returns deleted content; "
        "<b>unreadable</b> — no read path does, but bytes remain (or could not be checked); "
        "<b>erased</b> — no read path returns them and the bytes are gone from every file.</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)
