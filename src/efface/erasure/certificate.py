"""Deletion certificates: one erasure, replayed from the ledger, for an auditor.

A certificate states what was asked (the selector, as keyed hashes), when, the erasure
epoch, what was released, erased, retained (and why) and quarantined, and every
verification of it with each check's outcome and time; it carries the ledger entries that
prove all this and the result of re-checking the whole hash chain at export time. It holds
no personal data: keys, subjects and tenants appear only as the store's keyed hashes, so
whoever holds the key (the store's operator) can confirm a given key is covered, and nobody
else learns one.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from typing import Any

from .ledger import verify_chain

FORMAT = "efface-deletion-certificate/1"


def build(receipt: dict, entries: list[dict], store_id: str, now: float) -> dict[str, Any]:
    """The certificate as a JSON-ready dict. ``receipt`` is the stored (hashed) receipt row,
    ``entries`` the whole ledger, oldest first."""
    handle = receipt["handle"]
    body = receipt["body"]
    own = [e for e in entries if e["handle"] == handle]
    verifications = []
    for e in own:
        if e["kind"] != "verify":
            continue
        b = json.loads(e["body"])
        verifications.append(
            {
                "ledger_seq": e["seq"],
                "at": e["at"],
                "level": b["level"],
                "receipt_level": b["receipt_level"],
                "scanned_bytes": b.get("scanned_bytes", 0),
                "checks": b["checks"],
                "fingerprints_discarded": b.get("fingerprints_discarded", False),
            }
        )
    chain = verify_chain(entries)
    return {
        "format": FORMAT,
        "store": store_id,
        "generated_at": now,
        "handle": handle,
        "request": {
            "kind": receipt["kind"],
            "selector": body["selector"],
            "acknowledged_at": body["acknowledged_at"],
            "epoch": receipt["epoch"],
        },
        "level": body["level"],
        "outcome": {
            "released": body["released"],
            "erased": body["erased"],
            "retained": body["retained"],
            "quarantined": body["quarantined"],
            "derivations": body.get("derivations", []),
            "policy": body.get("policy"),
            "identifiers_erased": body.get("identifiers_erased", False),
            "max_propagation_s": body["max_propagation_s"],
        },
        "verifications": verifications,
        "ledger": {
            "entries": [
                {
                    "seq": e["seq"],
                    "at": e["at"],
                    "kind": e["kind"],
                    "hash": e["hash"],
                    "prev": e["prev"],
                    "body": e["body"],
                }
                for e in own
            ],
            "chain": chain.to_dict(),
            "head": {"seq": entries[-1]["seq"], "hash": entries[-1]["hash"]} if entries else None,
        },
        "how_to_check": (
            "Each ledger entry's hash is SHA-256 over (prev, seq, at, kind, handle, body); recompute it "
            "from the entries above and compare with a ledger head you kept earlier. Keys, subjects and "
            "tenants are HMAC-SHA256 under the store's secret: the operator can show that a given key "
            "hashes to an entry listed here."
        ),
    }


def _t(ts: float | None) -> str:
    if ts is None:
        return "—"
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (OverflowError, OSError, ValueError):  # a ttl of timedelta.max: past the calendar's end
        return "after 9999-12-31" if ts > 0 else "before 0001-01-01"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "<p class=none>none</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#1b1b1b}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin:.5em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top;word-break:break-all}
th{background:#f4f4f4} .level{font-size:1.3em;font-weight:600;padding:.2em .6em;border-radius:4px}
.erased{background:#d8f5dc} .unreadable{background:#fff3c4} .intent{background:#fde0e0}
.pass{color:#116b26} .fail,.cannot_verify{color:#a01919;font-weight:600} .recorded{color:#555}
.none{color:#777} code{font-size:.9em} .muted{color:#666;font-size:.9em}
"""


def to_html(cert: dict[str, Any]) -> str:
    """A self-contained, readable page of the certificate (every value escaped)."""
    r, o = cert["request"], cert["outcome"]
    level = cert["level"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>Deletion certificate {html.escape(cert['handle'])}</title><style>{_STYLE}</style></head><body>",
        "<h1>Deletion certificate</h1>",
        f"<p class=muted>{html.escape(cert['format'])} · store {html.escape(cert['store'])} · generated "
        f"{_t(cert['generated_at'])}</p>",
        f"<p>Evidence level: <span class='level {html.escape(level)}'>{html.escape(level)}</span></p>",
        "<h2>What was asked</h2>",
        _table(
            ["handle", "kind", "acknowledged", "erasure epoch"],
            [[cert["handle"], r["kind"], _t(r["acknowledged_at"]), r["epoch"]]],
        ),
        _table(
            ["selector field", "value (keyed hash unless a purpose)"],
            [[k, v] for k, v in r["selector"].items() if v is not None],
        ),
        "<h2>What happened</h2>",
        _table(
            [
                "released claims",
                "erased records",
                "retained records",
                "quarantined derived records",
                "derivation policy",
                "identifiers erased",
                "declared max propagation (s)",
            ],
            [
                [
                    len(o["released"]),
                    len(o["erased"]),
                    len(o["retained"]),
                    len(o["quarantined"]),
                    o["policy"],
                    o["identifiers_erased"],
                    o["max_propagation_s"],
                ]
            ],
        ),
        "<h3>Erased records (key hashes)</h3>",
        _table(["key hash"], [[k] for k in o["erased"]]),
        "<h3>Retained, and why</h3>",
        _table(
            ["key hash", "purpose", "basis", "until", "reason"],
            [[x["key_h"], x["purpose"], x["basis"], _t(x["expires_at"]), x["reason"]] for x in o["retained"]],
        ),
        "<h3>Derived records</h3>",
        _table(["key hash", "why", "action"], [[d["key_h"], d["why"], d["action"]] for d in o["derivations"]]),
        "<h2>Verifications</h2>",
    ]
    if not cert["verifications"]:
        parts.append("<p class=none>never verified: the level is what the acknowledgement alone proves</p>")
    for v in cert["verifications"]:
        parts.append(f"<h3>{_t(v['at'])} — level {html.escape(v['level'])} (ledger seq {v['ledger_seq']})</h3>")
        rows = "".join(
            f"<tr><td>{html.escape(c['name'])}</td><td>{html.escape(c['rung'])}</td>"
            f"<td class='{html.escape(c['outcome'])}'>{html.escape(c['outcome'])}</td>"
            f"<td>{_t(c['at'])}</td><td>{c['duration_s']:.3f}</td><td>{html.escape(c['detail'])}</td></tr>"
            for c in v["checks"]
        )
        parts.append(
            "<table><thead><tr><th>check</th><th>rung</th><th>outcome</th><th>at</th><th>s</th>"
            f"<th>evidence</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    chain = cert["ledger"]["chain"]
    parts += [
        "<h2>Ledger</h2>",
        f"<p>Hash chain re-checked at export: <b class='{'pass' if chain['ok'] else 'fail'}'>"
        f"{'intact' if chain['ok'] else 'BROKEN'}</b> ({chain['entries']} entries)"
        + "".join(f"<br>{html.escape(p)}" for p in chain["problems"])
        + "</p>",
        _table(
            ["seq", "at", "kind", "hash", "prev"],
            [[e["seq"], _t(e["at"]), e["kind"], e["hash"], e["prev"]] for e in cert["ledger"]["entries"]],
        ),
        f"<p class=muted>Ledger head at export: {html.escape(json.dumps(cert['ledger']['head']))}</p>",
        f"<p class=muted>{html.escape(cert['how_to_check'])}</p>",
        "</body></html>",
    ]
    return "\n".join(parts)
