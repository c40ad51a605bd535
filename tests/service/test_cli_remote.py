"""Every command a person needs, run by the CLI against a running server (``EFFACE_URL``,
``EFFACE_API_KEY``) while the server holds the store: the client answers, the store is never
opened by the CLI, and the commands that need the store's own files say where to run them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from efface.cli import cli


def test_every_person_facing_command_against_a_running_server(served, monkeypatch, tmp_path):
    monkeypatch.setenv("EFFACE_URL", served.url)
    monkeypatch.setenv("EFFACE_API_KEY", served.key("acme"))
    monkeypatch.delenv("EFFACE_STORE", raising=False)
    monkeypatch.delenv("EFFACE_TENANT", raising=False)
    run = CliRunner().invoke

    def ok(*args):
        out = run(cli, [*args, "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    ok("write", "n1", "Zelda Quaxworth prefers oolong tea", "--subject", "zq", "--purpose", "support")
    ok("write", "d1", "a digest: Zelda Quaxworth called twice", "--subject", "svc", "--purpose", "analytics")
    ok("register-subject", "zq", "--identifier", "Zelda Quaxworth")
    ok("retain", "n1", "--subject", "zq", "--purpose", "audit", "--basis", "legal_hold")
    assert ok("read", "n1", "--purpose", "support")["memory"]["text"] == "Zelda Quaxworth prefers oolong tea"
    assert [h["key"] for h in ok("recall", "oolong", "--purpose", "support")["hits"]] == ["n1"]

    receipt = ok("forget", "--subject", "zq")
    handle = receipt["handle"]
    assert "d1" in receipt["quarantined"] and [r["purpose"] for r in receipt["retained"]] == ["audit"]
    assert "d1" in [q["key"] for q in ok("quarantine", "list")["quarantined"]]
    assert ok("status", handle)["handle"] == handle
    assert ok("wait", handle, "--until", "absorbed", "--timeout", "20")["settled"] is True
    first = run(cli, ["verify", handle, "--json"])  # exits 1 below 'erased': its bytes are not proven gone yet
    assert json.loads(first.output)["level"] in ("unreadable", "erased")
    # (that forget erased no record: n1 is held for audit; this one does)
    ok("write", "n2", "Bo Nkemelu asked for a callback", "--subject", "bo", "--purpose", "support")
    erasure = ok("forget", "--key", "n2")["handle"]
    assert ok("wait", erasure, "--timeout", "20")["erased"] is True
    assert ok("verify", erasure)["level"] == "erased"
    assert handle in [r["handle"] for r in ok("receipts")["receipts"]]
    assert handle in [e["handle"] for e in ok("ledger", "list")["entries"]]
    assert ok("ledger", "verify")["ok"] is True
    cert = tmp_path / "cert.json"
    ok("ledger", "export", handle, "--out", str(cert), "--html", str(tmp_path / "cert.html"))
    assert json.loads(cert.read_text())["handle"] == handle
    assert "<html" in (tmp_path / "cert.html").read_text().lower()
    ok("quarantine", "release", "d1", "--reason", "reviewed: keeps no personal data")
    assert "d1" not in [q["key"] for q in ok("quarantine", "list")["quarantined"]]

    # The tenant comes from the key: asking for another one is refused.
    out = run(cli, ["read", "n1", "--purpose", "support", "--tenant", "globex", "--json"])
    assert out.exit_code == 2 and json.loads(out.output)["error"]["type"] == "Forbidden"
    # What works on the store's own files is refused with where to run it, nothing done.
    for args in (["compact"], ["sweep"], ["backup", str(tmp_path / "b.efb")]):
        out = run(cli, [*args, "--json"])
        assert out.exit_code != 0, args
        error = json.loads(out.output)["error"]
        assert error["type"] == "RemoteUnsupported" and "where the store is" in error["message"], args
    # The server held the store all along: the CLI never opened it.
    assert handle in [r["handle"] for r in served.store.receipts("acme")]
