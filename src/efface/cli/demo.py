"""``efface demo``: the two incidents of docs/concepts.md §1, replayed side by side.

Each incident runs twice on the same data: once against :class:`NaiveStore`, a small
in-process store built the way the incident systems were (it is the comparison, not part of
efface), and once against a real efface store in a temporary directory, through efface's
public calls only. Every probe asks both stores the same question after the forget was
acknowledged and records what each one served; a probe's ``forbidden`` lists the keys and
texts that must not come back. efface's side also records what the same probe returned
before the forget, which shows the probe could see the data.

The efface store is opened with ``background=False`` and not compacted before the probes,
so its vector index really still holds the erased vectors (``pending``) while they run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

import efface
from efface.embed import HashingEmbedder

from .naive import NaiveStore
from .render import fmt_time, paths_table, render_receipt

CONCEPTS = "docs/concepts.md"
"""Where the repository states the incidents, the vocabulary, the invariants and the ladder."""
BENCHMARKS = "docs/benchmarks.md"
"""Where the repository keeps the figures that hold now."""

TENANT = "acme"
DAY = 86_400

# -- Incident A data: one subject's memories, a bystander's, and two analytics digests -------
ALICE = {
    "acme:alice:1": "asked for a refund on order 4711 because the kettle arrived cracked",
    "acme:alice:2": "prefers phone calls in the evening, never before six",
    "acme:alice:3": "new delivery address is 14 Rosemary Lane, flat 3, Leeds",
    "acme:alice:4": "paid with the visa card ending 0451",
    "acme:alice:5": "complained twice that the courier left parcels in the rain",
    "acme:alice:6": "her daughter starts at Parkside primary school in September",
    "acme:alice:7": "wants the loyalty points moved to the family account",
    "acme:alice:8": "reported the blender lid as missing from order 4788",
}
BOB = {
    "acme:bob:1": "wants invoices e-mailed to the accounts team every month",
    "acme:bob:2": "asked whether the bike rack fits a 2019 estate car",
    "acme:bob:3": "prefers chat support over phone calls",
}
DIGEST_KEY = "acme:digest:w14"
DIGEST = "Weekly support digest: Alice asked twice about her refund for order 4711 and wants evening calls"
OTHER_DIGEST = ("acme:digest:w15", "Weekly support digest: Bob asked about the bike rack and monthly invoices")

# -- Incident B data: one key under two retention scopes, its neighbour, and bystanders ----------
PREFIX = "tenant:acme:session:"
KEY42, SECRET42 = PREFIX + "42", "caller read out the card ending 4242; deliver to 221B Baker Street, London"
KEY43, TEXT43 = PREFIX + "43", "caller asked to move the delivery slot to Friday morning"
FAQ = ("tenant:acme:faq:hours", "opening hours are nine to five, Monday to Saturday")
BILLING = ("tenant:acme:billing:9", "invoice 9 for the garden furniture was paid in full")


# == The naive comparison ========================================================================
def _overlaps(text: str, forbidden: Iterable[str]) -> bool:
    return any(text and (text in f or f in text) for f in forbidden)


def leaked(served: list[dict], forbidden: dict) -> list[dict]:
    """The served items that are forbidden: by key, or by text (a fragment counts)."""
    return [s for s in served if s["key"] in forbidden["keys"] or _overlaps(s["text"], forbidden["texts"])]


@dataclass
class Probe:
    id: str
    path: str
    title: str
    forbidden: dict
    naive: list[dict]
    efface: list[dict]
    efface_before: list[dict]
    naive_note: str
    efface_note: str
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "path": self.path,
            "title": self.title,
            "forbidden": self.forbidden,
            "naive": {
                "served": self.naive,
                "leaked": bool(leaked(self.naive, self.forbidden)),
                "note": self.naive_note,
            },
            "efface": {
                "served": self.efface,
                "leaked": bool(leaked(self.efface, self.forbidden)),
                "served_before_forget": self.efface_before,
                "note": self.efface_note,
            },
            **self.extra,
        }


def _hits(store: efface.Store, queries: Iterable[str], purposes: Iterable[str], k: int = 5) -> list[dict]:
    out, seen = [], set()
    for purpose in purposes:
        for query in queries:
            for h in store.recall(query, tenant=TENANT, purpose=purpose, k=k):
                if (h.key, purpose) not in seen:
                    seen.add((h.key, purpose))
                    out.append({"key": h.key, "text": h.text, "via": [*h.via], "purpose": purpose})
    return out


def _reads(store: efface.Store, keys: Iterable[str], purpose: str) -> list[dict]:
    out = []
    for key in keys:
        m = store.read(key, tenant=TENANT, purpose=purpose)
        if m is not None:
            out.append({"key": m.key, "text": m.text, "via": ["read"], "purpose": purpose})
    return out


def _naive_hits(naive: NaiveStore, queries: Iterable[str], k: int = 5) -> list[dict]:
    out, seen = [], set()
    for query in queries:
        for h in naive.recall(query, tenant=TENANT, k=k):
            if (h["key"], h["text"]) not in seen:
                seen.add((h["key"], h["text"]))
                out.append(h)
    return out


def _timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, round((time.perf_counter() - t0) * 1000, 1)


# == Incident A =====================================================================================
def _verification(store: efface.Store, handle: str) -> dict:
    """verify() after wait(): the checks behind the level, as the ledger records them."""
    v = store.verify(handle)
    return {
        "level": v.level,
        "scanned_bytes": v.scanned_bytes,
        "files": len(v.scanned_files),
        "checks": {c.name: c.outcome for c in v.checks},
        "ledger_seq": v.ledger_seq,
    }


def incident_a(store: efface.Store, naive: NaiveStore) -> dict:
    store.register_subject("alice", tenant=TENANT, identifiers=["Alice", "alice@example.com"])
    store.write_many(
        [{"key": k, "text": t} for k, t in ALICE.items()], tenant=TENANT, subject="alice", purpose="support"
    )
    store.write_many([{"key": k, "text": t} for k, t in BOB.items()], tenant=TENANT, subject="bob", purpose="support")
    # The rolling digests: written under the tenant's service account, for analytics, with no
    # lineage recorded (as in the incident). Only the mention index can tie the first to Alice.
    store.write(DIGEST_KEY, DIGEST, tenant=TENANT, subject="svc-analytics", purpose="analytics")
    store.write(*OTHER_DIGEST, tenant=TENANT, subject="svc-analytics", purpose="analytics")
    for key, text in ALICE.items():
        naive.write(key, text, tenant=TENANT, subject="alice")
    for key, text in BOB.items():
        naive.write(key, text, tenant=TENANT, subject="bob")
    naive.write(DIGEST_KEY, DIGEST, tenant=TENANT, subject="svc-analytics")
    naive.write(*OTHER_DIGEST, tenant=TENANT, subject="svc-analytics")
    naive.replicate()

    by_words = [ALICE["acme:alice:1"], ALICE["acme:alice:3"], ALICE["acme:alice:4"]]
    by_meaning = ["refund for a cracked kettle", "evening phone calls", "courier parcels rain"]
    erased = {"keys": sorted(ALICE), "texts": list(ALICE.values())}
    digest = {"keys": [DIGEST_KEY], "texts": [DIGEST]}
    before = {
        "A1": _hits(store, by_words, ["support"]),
        "A2": _hits(store, by_meaning, ["support"]),
        "A3": _hits(store, ["alice"], ["analytics"]),
    }

    naive_ack, naive_ms = _timed(lambda: naive.forget(tenant=TENANT, subject="alice"))
    receipt, efface_ms = _timed(lambda: store.forget(tenant=TENANT, subject="alice"))
    during = store.status(receipt.handle)

    naive_a1 = _naive_hits(naive, by_words)
    naive_a2 = _naive_hits(naive, by_meaning)
    probes = [
        Probe(
            "A1",
            "ann",
            "recall by an erased memory's own words: vector-index candidates",
            erased,
            naive_a1,
            _hits(store, by_words, ["support"]),
            before["A1"],
            "the vector index still holds the erased vectors and recall serves its candidates "
            "without asking the primary",
            "the vector index still holds the erased vectors (pending), but every candidate is "
            "resolved against the origin's live claims before any text leaves the store",
        ),
        Probe(
            "A2",
            "chunk-cache",
            "recall by a paraphrase: text served from the reranker's chunk cache",
            erased,
            naive_a2,
            _hits(store, by_meaning, ["support"]),
            before["A2"],
            "the primary no longer has these texts; the reranker took them from its chunk cache, "
            "keyed by content hash, which a delete by key never finds",
            "efface has no text cache: a hit's text is read from the origin in the same step that checks its claims",
        ),
        Probe(
            "A3",
            "digest",
            "recall('alice') for analytics: the digest written under a service account",
            digest,
            _naive_hits(naive, ["alice"]),
            _hits(store, ["alice"], ["analytics"]),
            before["A3"],
            "the digest belongs to the service account, so forget(subject=alice) leaves it, "
            "and recall serves it because its text names her",
            "the digest is not erased (another subject's claim keeps it) but it names Alice's "
            "registered identifier, so the forget quarantined it and the receipt lists it; it "
            "comes back once re-derived without her or released. Only registered identifiers "
            "are found: a name never passed to register_subject is not",
        ),
    ]
    # The probes went through every read path; none of them absorbs an erasure.
    still = store.status(receipt.handle)
    settled = store.wait(receipt.handle, timeout=30)
    after_wait = _hits(store, by_words + by_meaning, ["support"])
    verification = _verification(store, receipt.handle)
    return {
        "id": "A",
        "title": "Incident A: the acknowledgement was a policy fact, not a read fact",
        "forget": "forget(subject='alice')",
        "acknowledgement": {
            "naive": {
                "answer": naive_ack,
                "ms": naive_ms,
                "point_read_of_an_erased_key": naive.read("acme:alice:1", tenant=TENANT),
            },
            "efface": {
                "handle": receipt.handle,
                "epoch": receipt.epoch,
                "level": receipt.level,
                "erased": len(receipt.erased),
                "quarantined": list(receipt.quarantined),
                "ms": efface_ms,
                "point_read_of_an_erased_key": _reads(store, ["acme:alice:1"], "support") or None,
            },
        },
        "probes": [p.to_dict() for p in probes],
        "efface_paths": {
            "at_acknowledgement": {n: p.to_dict() for n, p in receipt.paths.items()},
            "during_probes": during.to_dict(),
            "after_probes": still.to_dict(),
            "after_wait": settled.to_dict(),
        },
        "efface_after_wait": {"served": after_wait, "leaked": bool(leaked(after_wait, erased))},
        "verification": verification,
        "receipts": [receipt.to_dict()],
    }


# == Incident B =====================================================================================
def incident_b(store: efface.Store, naive: NaiveStore) -> dict:
    # One key, two retention scopes: the tenant's 30-day retention (contract) and the
    # session prefix's 7-day retention (consent). In efface they are two claims.
    store.write(
        KEY42, SECRET42, tenant=TENANT, subject="carol", purpose="tenant-retention", basis="contract", ttl=30 * DAY
    )
    store.retain(KEY42, tenant=TENANT, subject="carol", purpose="session", basis="consent", ttl=7 * DAY)
    store.write(KEY43, TEXT43, tenant=TENANT, subject="carol", purpose="session", ttl=7 * DAY)
    store.write(*FAQ, tenant=TENANT, subject="svc-faq", purpose="session")
    store.write(*BILLING, tenant=TENANT, subject="dave", purpose="tenant-retention", basis="contract")
    naive.write(KEY42, SECRET42, tenant=TENANT, subject="carol", archive=True)
    naive.write(KEY43, TEXT43, tenant=TENANT, subject="carol")
    naive.write(*FAQ, tenant=TENANT, subject="svc-faq")
    naive.write(*BILLING, tenant=TENANT, subject="dave", archive=True)
    naive.replicate()
    now = time.time()
    listing_before = naive.list_prefix(PREFIX, tenant=TENANT, now=now)

    words = ["4242", "Baker Street", "Friday morning"]
    unrelated = ["what are the opening hours on Saturday"]
    both = ["session", "tenant-retention"]
    session_scope = {"keys": [KEY42, KEY43], "texts": [SECRET42, TEXT43]}
    everything = {"keys": [KEY42, KEY43], "texts": [SECRET42, TEXT43]}
    before = {
        "B1": _reads(store, [KEY42, KEY43], "session"),
        "B3": _hits(store, words, both),
        "B4": _hits(store, unrelated, both),
    }

    naive_ack, naive_ms = _timed(lambda: naive.forget(tenant=TENANT, prefix=PREFIX))
    r1, efface_ms = _timed(lambda: store.forget(tenant=TENANT, prefix=PREFIX, purpose="session"))
    listing_after = naive.list_prefix(PREFIX, tenant=TENANT, now=now + 1)

    naive_b1 = [
        {"key": k, "text": t, "via": ["read@replica"]}
        for k in (KEY42, KEY43)
        if (t := naive.read(k, tenant=TENANT, host="replica")) is not None
    ]
    efface_b1 = _reads(store, [KEY42, KEY43], "session")
    # The receipt named the retention scope the forget left: the 30-day tenant retention.
    declared = [asdict(r) | {"until": fmt_time(r.expires_at)} for r in r1.retained]
    b2_before = _reads(store, [KEY42], "tenant-retention")
    r2, r2_ms = _timed(lambda: store.forget(tenant=TENANT, prefix=PREFIX, purpose="tenant-retention"))
    during = store.status(r2.handle)
    naive_b2 = [
        {"key": KEY42, "text": t, "via": ["read@archive"]}
        for t in [naive.read(KEY42, tenant=TENANT, host="archive")]
        if t is not None
    ]

    probes = [
        Probe(
            "B1",
            "point read",
            "point read of a forgotten key (right after the acknowledgement)",
            session_scope,
            naive_b1,
            efface_b1,
            before["B1"],
            "the listing was empty and taken as proof, but the replica had not applied the "
            "tombstone yet and served the value",
            "reads go to the origin, where the tombstone is committed before the acknowledgement",
        ),
        Probe(
            "B2",
            "second retention scope",
            "the same key, kept under the tenant's 30-day retention",
            {"keys": [KEY42], "texts": [SECRET42]},
            naive_b2,
            _reads(store, [KEY42], "tenant-retention"),
            b2_before,
            "the forget cleared the prefix scope; the compliance archive (another host, same "
            "namespace) still serves the value, and the acknowledgement never said so",
            "the first receipt listed the key as retained under 'tenant-retention' (basis contract, "
            "30 days) and why; a forget naming that purpose released it, and then nothing serves it",
            extra={"efface_declared_by_first_receipt": declared},
        ),
        Probe(
            "B3",
            "full-text",
            "keyword search for words of the deleted texts",
            everything,
            _naive_hits(naive, words),
            _hits(store, words, both),
            before["B3"],
            "the keyword index keeps the deleted tokens until its own rebuild",
            "the full-text index is updated in the forget's own transaction (and secure-delete "
            "overwrites the freed pages)",
        ),
        Probe(
            "B4",
            "vector",
            "semantic search for an unrelated question",
            everything,
            _naive_hits(naive, unrelated),
            _hits(store, unrelated, both),
            before["B4"],
            "the vector index returns fragments of the deleted text as nearest neighbours",
            "the vector index still holds the vectors (pending) but its candidates are resolved "
            "against the origin; only live records come back",
        ),
    ]
    still = store.status(r2.handle)
    settled = store.wait(r2.handle, timeout=30)
    after_wait = _hits(store, words + unrelated, both)
    verification = _verification(store, r2.handle)
    return {
        "id": "B",
        "title": "Incident B: the acknowledgement was intent, not evidence",
        "forget": "forget(prefix='tenant:acme:session:', purpose='session'), then purpose='tenant-retention'",
        "acknowledgement": {
            "naive": {
                "answer": naive_ack,
                "ms": naive_ms,
                "listing_before": listing_before,
                "listing_after": listing_after,
            },
            "efface": {
                "handle": r1.handle,
                "epoch": r1.epoch,
                "level": r1.level,
                "erased": list(r1.erased),
                "retained": declared,
                "ms": efface_ms,
                "second_forget": {"handle": r2.handle, "epoch": r2.epoch, "erased": list(r2.erased), "ms": r2_ms},
            },
        },
        "probes": [p.to_dict() for p in probes],
        "efface_paths": {
            "at_acknowledgement": {n: p.to_dict() for n, p in r2.paths.items()},
            "during_probes": during.to_dict(),
            "after_probes": still.to_dict(),
            "after_wait": settled.to_dict(),
        },
        "efface_after_wait": {"served": after_wait, "leaked": bool(leaked(after_wait, everything))},
        "verification": verification,
        "bystanders_after": _reads(store, [FAQ[0]], "session") + _reads(store, [BILLING[0]], "tenant-retention"),
        "receipts": [r1.to_dict(), r2.to_dict()],
    }


# == Running and rendering =========================================================================
def replay(directory: str) -> dict:
    """Run both incidents on a fresh store in ``directory``; return the findings."""
    embedder = HashingEmbedder()
    t0 = time.perf_counter()
    with efface.open(directory, embedder="hashing", background=False) as store:
        a = incident_a(store, NaiveStore(embedder))
        b = incident_b(store, NaiveStore(embedder))
        check = store.verify_ledger()
        ledger_text = json.dumps(store.ledger(), ensure_ascii=False)
    # Strings that cannot occur inside a hex digest by chance (a bare "4242" could).
    personal = ["alice", "carol", TENANT, *ALICE, *ALICE.values(), DIGEST, KEY42, SECRET42, KEY43, TEXT43, "Baker"]
    probes = a["probes"] + b["probes"]
    return {
        "demo": "the incidents of docs/concepts.md §1: a naive store versus efface",
        "docs": {"concepts": CONCEPTS, "benchmarks": BENCHMARKS},
        "embedder": embedder.name,
        "incidents": [a, b],
        "ledger": {**check.to_dict(), "personal_data_found": [p for p in personal if p in ledger_text]},
        "summary": {
            "probes": len(probes),
            "naive_leaked": sum(p["naive"]["leaked"] for p in probes),
            "efface_leaked": sum(p["efface"]["leaked"] for p in probes),
        },
        "seconds": round(time.perf_counter() - t0, 2),
    }


def run(*, keep: bool, as_json: bool, out: Console) -> dict:
    """Replay the incidents in a temporary store (deleted afterwards unless ``keep``) and print them."""
    tmp = tempfile.mkdtemp(prefix="efface-demo-")
    try:
        findings = replay(f"{tmp}/store")
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    findings["store"] = f"{tmp}/store" if keep else None
    if as_json:
        click.echo(json.dumps(findings, ensure_ascii=False, indent=2))
    else:
        render(out, findings)
    return findings


def _cell(served: list[dict], forbidden: dict, *, good: str) -> str:
    bad = leaked(served, forbidden)
    if not bad:
        return f"[green]✓ {good}[/] ({len(served)} live item(s) served)"
    first = bad[0]
    text = first["text"] if len(first["text"]) <= 60 else first["text"][:57] + "…"
    return f"[red]✗ SERVED {len(bad)} forbidden item(s)[/], e.g. {escape(first['key'])}: “{escape(text)}”"


def render(out: Console, f: dict) -> None:
    out.print(
        Panel.fit(
            "The two incidents of docs/concepts.md §1, replayed against a [bold]naive store[/] (a small in-process "
            "comparison class built the way the incident systems were; not efface) and against "
            "[bold]efface[/] (a real store, hashing embedder, compactor held back so the vector index is "
            "still [yellow]pending[/] while the probes run). A probe counts as served when a store hands "
            "out a key or text the forget named (a fragment counts).",
            title="efface demo",
        )
    )
    for inc in f["incidents"]:
        out.rule(f"[bold]{inc['title']}")
        ack = inc["acknowledgement"]
        out.print(f"forget: {inc['forget']}")
        naive, e = ack["naive"], ack["efface"]
        out.print(f"  naive answers  {escape(json.dumps(naive['answer']))} in {naive['ms']} ms")
        if "point_read_of_an_erased_key" in naive:
            out.print(
                f"  naive point read of an erased key: {naive['point_read_of_an_erased_key']} "
                "(the tombstone filters point reads; the leaks are elsewhere)"
            )
        if "listing_after" in naive:
            out.print(
                f"  naive listing of the prefix: before {escape(str(naive['listing_before']))}, "
                f"after {escape(str(naive['listing_after']))} (taken as proof of deletion)"
            )
        out.print(
            f"  efface answers a receipt in {e['ms']} ms: handle {e['handle']}, epoch {e['epoch']}, "
            f"level [bold]{e['level']}[/] (an acknowledgement alone proves intent; the read paths "
            "below show how far it went), full receipts at the end"
        )
        table = Table(
            title="After the acknowledgement, the same probe on both stores", title_justify="left", show_lines=True
        )
        table.add_column("probe", overflow="fold", max_width=30)
        table.add_column("naive store serves", overflow="fold")
        table.add_column("efface serves", overflow="fold")
        for p in inc["probes"]:
            table.add_row(
                f"[bold]{p['id']}[/] {p['title']}",
                _cell(p["naive"]["served"], p["forbidden"], good="nothing forbidden") + "\n" + p["naive"]["note"],
                _cell(p["efface"]["served"], p["forbidden"], good="nothing forbidden") + "\n" + p["efface"]["note"],
            )
        out.print(table)
        paths = inc["efface_paths"]
        out.print(paths_table(paths["during_probes"]["paths"], "efface read paths while the probes ran"))
        out.print(
            f"pending deletions while the probes ran: {paths['during_probes']['pending_deletions']}; "
            f"after them: {paths['after_probes']['pending_deletions']} (probes do not absorb erasures)"
        )
        out.print(
            f"after store.wait(): settled={paths['after_wait']['settled']}, pending deletions "
            f"{paths['after_wait']['pending_deletions']}; the same probes still serve nothing forbidden: "
            f"{not inc['efface_after_wait']['leaked']}"
        )
        out.print(paths_table(paths["after_wait"]["paths"], "efface read paths after wait()"))
        v = inc.get("verification")
        if v:
            passed = sum(1 for o in v["checks"].values() if o in ("pass", "recorded"))
            out.print(
                f"verify(): level [bold]{v['level']}[/] — {passed}/{len(v['checks'])} checks passed "
                f"(probes by id, by words, by nearest neighbours; a byte scan of {v['files']} files, "
                f"{v['scanned_bytes']:,} bytes); recorded in the ledger at seq {v['ledger_seq']}"
            )
    out.rule("[bold]efface receipts")
    for inc in f["incidents"]:
        for r in inc["receipts"]:
            render_receipt(out, r)
    led = f["ledger"]
    out.print(
        f"ledger: {led['entries']} entries, chain {'intact' if led['ok'] else 'BROKEN'}; "
        f"keys, texts, subjects or tenant found in it: {led['personal_data_found'] or 'none'}"
    )
    s = f["summary"]
    out.rule("[bold]summary")
    out.print(
        f"{s['probes']} probes: the naive store served forbidden content in [red]{s['naive_leaked']}[/], "
        f"efface in [green]{s['efface_leaked']}[/]. ({f['seconds']} s)"
    )
    out.print(f"What efface promises, and why: {CONCEPTS}; what it measured: {BENCHMARKS} (in efface's repository).")
    if f.get("store"):
        out.print(f"store kept at {f['store']}")


__all__ = ["NaiveStore", "leaked", "replay", "run"]
