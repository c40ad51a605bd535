"""``efface demo``: the naive comparison leaks in every incident probe, efface in none.

The findings are checked from the raw results the demo records (what each store served,
and what the probe forbids), not from the demo's own verdicts.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from efface.cli import cli
from efface.cli import demo as demo_module


def _forbidden_items(served: list[dict], forbidden: dict) -> list[dict]:
    """Served items that carry a forbidden key, a forbidden text, or a fragment of one."""
    out = []
    for item in served:
        text = item["text"]
        if item["key"] in forbidden["keys"] or any(text and (text in f or f in text) for f in forbidden["texts"]):
            out.append(item)
    return out


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("demo")
    old = tempfile.tempdir
    tempfile.tempdir = os.fspath(tmp)  # so the test can see that the demo cleans up after itself
    try:
        result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["demo", "--json"])
    finally:
        tempfile.tempdir = old
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    text = result.stdout.strip()
    doc, end = json.JSONDecoder().raw_decode(text)
    assert end == len(text), "demo --json printed more than one JSON document"
    assert os.listdir(tmp) == [], "the demo left its temporary store behind"
    assert doc["store"] is None
    return doc


@pytest.fixture(scope="module")
def incidents(findings) -> dict:
    return {inc["id"]: inc for inc in findings["incidents"]}


def _probes(findings):
    return [p for inc in findings["incidents"] for p in inc["probes"]]


def test_the_demo_points_at_documents_the_repository_holds(findings):
    """It cites docs/concepts.md (the incidents, the ladder), not a file a clone does not have."""
    root = Path(__file__).resolve().parent.parent
    assert findings["docs"] == {"concepts": "docs/concepts.md", "benchmarks": "docs/benchmarks.md"}
    assert all((root / doc).is_file() for doc in findings["docs"].values())
    assert "docs/concepts.md §1" in findings["demo"]


def test_every_probe_leaks_in_the_naive_store_and_not_in_efface(findings):
    probes = _probes(findings)
    assert [p["id"] for p in probes] == ["A1", "A2", "A3", "B1", "B2", "B3", "B4"]
    for p in probes:
        forbidden = p["forbidden"]
        assert forbidden["keys"] and forbidden["texts"], p["id"]
        # The probe can see the data: before the forget, efface served it through the same probe.
        assert _forbidden_items(p["efface"]["served_before_forget"], forbidden), p["id"]
        # After the acknowledgement: the naive store serves it, efface does not.
        assert _forbidden_items(p["naive"]["served"], forbidden), p["id"]
        assert _forbidden_items(p["efface"]["served"], forbidden) == [], p["id"]
        assert p["naive"]["leaked"] is True and p["efface"]["leaked"] is False
    assert findings["summary"] == {"probes": 7, "naive_leaked": 7, "efface_leaked": 0}


def test_incident_a(incidents):
    a = incidents["A"]
    erased_keys = set(demo_module.ALICE)
    erased_texts = set(demo_module.ALICE.values())
    [receipt] = a["receipts"]
    assert set(receipt["erased"]) == erased_keys
    assert receipt["level"] == "intent"
    assert a["acknowledgement"]["naive"]["answer"] == {"status": "erased", "keys": len(erased_keys)}
    # Point reads were never the problem, in either store.
    assert a["acknowledgement"]["naive"]["point_read_of_an_erased_key"] is None
    assert a["acknowledgement"]["efface"]["point_read_of_an_erased_key"] is None

    probes = {p["id"]: p for p in a["probes"]}
    # A1: the naive store serves erased keys from its vector index; efface serves none of them.
    naive_keys = {h["key"] for h in probes["A1"]["naive"]["served"]}
    assert naive_keys & erased_keys
    assert "ann" in {v for h in probes["A1"]["naive"]["served"] for v in h["via"]}
    assert not {h["key"] for h in probes["A1"]["efface"]["served"]} & erased_keys
    # A2: erased texts come back from the naive chunk cache; efface serves none, but does answer.
    assert {h["text"] for h in probes["A2"]["naive"]["served"]} & erased_texts
    assert not {h["text"] for h in probes["A2"]["efface"]["served"]} & erased_texts
    assert probes["A2"]["efface"]["served"], "efface should still answer with live records"
    assert {h["key"] for h in probes["A2"]["efface"]["served"]} <= set(demo_module.BOB)
    # A3: the digest under the service account is served by the naive store, quarantined by efface.
    assert demo_module.DIGEST_KEY in {h["key"] for h in probes["A3"]["naive"]["served"]}
    assert demo_module.DIGEST_KEY not in {h["key"] for h in probes["A3"]["efface"]["served"]}
    assert receipt["quarantined"] == [demo_module.DIGEST_KEY]
    assert demo_module.DIGEST_KEY not in receipt["erased"]
    assert all(r["key"] != demo_module.DIGEST_KEY for r in receipt["released"])
    assert {h["key"] for h in probes["A3"]["efface"]["served"]} == {demo_module.OTHER_DIGEST[0]}


def _assert_pending_then_absorbed(inc):
    paths = inc["efface_paths"]
    assert paths["at_acknowledgement"]["ann"]["state"] == "pending"
    assert paths["during_probes"]["paths"]["ann"]["state"] == "pending"
    assert paths["during_probes"]["pending_deletions"] > 0
    # The probes themselves did not absorb anything: the index really was behind while they ran.
    assert paths["after_probes"]["paths"]["ann"]["state"] == "pending"
    assert paths["after_probes"]["pending_deletions"] == paths["during_probes"]["pending_deletions"]
    after = paths["after_wait"]
    assert after["settled"] is True and after["pending_deletions"] == 0
    assert {p["state"] for p in after["paths"].values()} == {"absorbed"}
    assert inc["efface_after_wait"]["served"] and inc["efface_after_wait"]["leaked"] is False


def test_reads_are_safe_while_the_vector_index_is_pending(incidents):
    for inc in incidents.values():
        _assert_pending_then_absorbed(inc)


def test_incident_b(incidents):
    b = incidents["B"]
    key42, key43 = demo_module.KEY42, demo_module.KEY43
    naive = b["acknowledgement"]["naive"]
    assert naive["listing_before"] == [key42, key43] and naive["listing_after"] == []
    r1, r2 = b["receipts"]
    # The first forget released the session scope only, and said what it kept and why.
    assert sorted((r["key"], r["purpose"]) for r in r1["released"]) == [(key42, "session"), (key43, "session")]
    assert r1["erased"] == [key43]
    [kept] = r1["retained"]
    assert (kept["key"], kept["purpose"], kept["basis"]) == (key42, "tenant-retention", "contract")
    assert kept["expires_at"] is not None and kept["reason"]
    assert r2["erased"] == [key42] and r2["epoch"] > r1["epoch"]

    probes = {p["id"]: p for p in b["probes"]}
    assert {h["text"] for h in probes["B1"]["naive"]["served"]} == {demo_module.SECRET42, demo_module.TEXT43}
    assert probes["B1"]["efface"]["served"] == []
    # B2: the retained copy was served by efface before the second forget, as its receipt declared.
    assert [h["text"] for h in probes["B2"]["efface"]["served_before_forget"]] == [demo_module.SECRET42]
    assert [d["key"] for d in probes["B2"]["efface_declared_by_first_receipt"]] == [key42]
    assert [h["text"] for h in probes["B2"]["naive"]["served"]] == [demo_module.SECRET42]
    assert probes["B2"]["efface"]["served"] == []
    # B3/B4: fragments of the deleted texts from the naive indexes; only live records from efface.
    assert any("4242" in h["text"] for h in probes["B3"]["naive"]["served"])
    assert not any("4242" in h["text"] or "Friday" in h["text"] for h in probes["B3"]["efface"]["served"])
    assert any(h["key"] in (key42, key43) for h in probes["B4"]["naive"]["served"])
    assert probes["B4"]["efface"]["served"]
    assert {h["key"] for h in probes["B4"]["efface"]["served"]} <= {demo_module.FAQ[0], demo_module.BILLING[0]}
    # Nothing outside the selectors was lost.
    assert {(m["key"], m["text"]) for m in b["bystanders_after"]} == {demo_module.FAQ, demo_module.BILLING}


def test_ledger_is_intact_and_holds_no_personal_data(findings):
    ledger = findings["ledger"]
    # three erasures (incident A's forget, incident B's two) and a verification of each incident's last
    assert ledger["ok"] is True and ledger["entries"] == 5 and ledger["problems"] == []
    assert ledger["personal_data_found"] == []


def test_each_incident_ends_verified_erased(findings):
    for inc in findings["incidents"]:
        v = inc["verification"]
        assert v["level"] == "erased", v["checks"]
        assert v["scanned_bytes"] > 0 and v["checks"]["bytes"] == "pass"


def test_naive_store_is_not_fixed_by_a_later_read():
    """The comparison is honest: its leaks come from its design, and a rebuild-free naive
    store keeps leaking however often it is asked."""
    naive = demo_module.NaiveStore(demo_module.HashingEmbedder())
    naive.write("k", "the secret word is marmalade", tenant=demo_module.TENANT, subject="s")
    assert naive.forget(tenant=demo_module.TENANT, subject="s") == {"status": "erased", "keys": 1}
    assert naive.read("k", tenant=demo_module.TENANT) is None
    for _ in range(2):
        assert "the secret word is marmalade" in [
            h["text"] for h in naive.recall("marmalade", tenant=demo_module.TENANT)
        ]


def test_human_demo_and_keep(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", os.fspath(tmp_path))
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["demo", "--keep"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    out = result.stdout
    for needle in (
        "naive store",
        "Incident A",
        "Incident B",
        "A1",
        "B4",
        "efface receipts",
        "pending",
        "absorbed",
        "store kept at",
        "docs/concepts.md",
    ):
        assert needle in out
    assert "the naive store served forbidden content in 7, efface in 0" in out
    [kept] = os.listdir(tmp_path)
    assert os.path.isdir(tmp_path / kept / "store")
