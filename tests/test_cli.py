"""The command line: every command end to end on a fresh store, through click's runner.

The CLI is a thin layer, so these tests check what only it does: parsing, the one JSON
document under ``--json``, the human tables, and the translation of library errors into
exit codes (2 for bad input or scope, 1 for the rest) without a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import apsw
import click
import pytest
from click.testing import CliRunner

import efface
from efface.cli import cli

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def runner() -> CliRunner:
    # A wide console so rich does not fold keys and texts across lines; no ambient store.
    return CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "COLUMNS": "200"})


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return os.fspath(tmp_path / "store")


@pytest.fixture
def efc(runner, store_dir):
    """``efc(*args, code=0, input=None)``: run ``efface --store DIR --embedder hashing *args``
    and check the exit code."""

    def _run(*args: str, code: int = 0, input: str | None = None):
        result = runner.invoke(cli, ["--store", store_dir, "--embedder", "hashing", *args], input=input)
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
        assert "Traceback" not in result.stdout + result.stderr
        return result

    return _run


def one_json(result) -> dict:
    """The stdout of a --json run: exactly one JSON document, nothing around it."""
    text = result.stdout.strip()
    doc, end = json.JSONDecoder().raw_decode(text)
    assert end == len(text), "more than one JSON document (or stray output) on stdout"
    assert isinstance(doc, dict)
    return doc


@pytest.fixture
def js(efc):
    """``js(*args, code=0)``: run with --json and return the one document."""

    def _run(*args: str, code: int = 0, input: str | None = None) -> dict:
        result = efc(*args, "--json", code=code, input=input)
        assert result.stderr == "", "nothing may go to stderr in --json mode"
        return one_json(result)

    return _run


# -- every command end to end -------------------------------------------------------------------
def test_write_read_recall(js, efc):
    doc = js(
        "write",
        "acme:n1",
        "Alice prefers green tea in the afternoon",
        "--subject",
        "alice",
        "--purpose",
        "support",
        "--metadata",
        '{"channel": "chat"}',
        "--ttl",
        "3600",
    )
    assert doc["key"] == "acme:n1" and doc["epoch"] >= 1
    js(
        "write",
        "acme:n2",
        "summary of the tea preference",
        "--subject",
        "svc",
        "--purpose",
        "support",
        "--source",
        "acme:n1",
        "--source",
        "acme:n0",
    )
    doc = js("read", "acme:n1", "--purpose", "support")
    assert doc["found"] is True
    memory = doc["memory"]
    assert memory["text"] == "Alice prefers green tea in the afternoon"
    assert memory["metadata"] == {"channel": "chat"}
    assert memory["tenant"] == "default"
    [claim] = memory["claims"]
    assert (claim["subject"], claim["purpose"], claim["basis"]) == ("alice", "support", "consent")
    assert claim["expires_at"] is not None
    assert js("read", "acme:n2", "--purpose", "support")["memory"]["sources"] == ["acme:n1", "acme:n0"]

    hits = js("recall", "green tea", "--purpose", "support", "-k", "1")["hits"]
    assert [h["key"] for h in hits] == ["acme:n1"]
    assert js("recall", "tea", "--purpose", "support", "--subject", "svc")["hits"][0]["key"] == "acme:n2"

    human = efc("read", "acme:n1", "--purpose", "support").stdout
    assert "Alice prefers green tea in the afternoon" in human and "chat" in human
    human = efc("recall", "green tea", "--purpose", "support").stdout
    assert "acme:n1" in human and "Alice prefers green tea in the afternoon" in human


def test_recall_filters_turns_and_widens_to_their_session(js, efc):
    """recall --after/--before/--said-by/--window: the library's turn filters (docs/conversations.md)."""
    turns = [
        ("t1", "Dave: I saw the band play in Lisbon", "dave", "2023-05-01"),
        ("t2", "Ana: which band was that", "ana", "2023-05-01"),
        ("t3", "Dave: the band from the festival, again in Porto", "dave", "2023-06-10"),
    ]
    for key, text, speaker, day in turns:
        meta = json.dumps({"speaker": speaker, "session": f"s-{day}", "at": day})
        js("write", key, text, "--subject", speaker, "--purpose", "support", "--metadata", meta)

    def keys(*args: str) -> list[str]:
        return [h["key"] for h in js("recall", "band", "--purpose", "support", *args)["hits"]]

    assert set(keys()) == {"t1", "t2", "t3"}
    assert set(keys("--said-by", "dave")) == {"t1", "t3"}
    assert keys("--after", "2023-06-01") == ["t3"]
    assert set(keys("--before", "2023-06-01")) == {"t1", "t2"}
    june = str(1685577600)  # 2023-06-01T00:00:00Z as unix seconds
    assert keys("--after", june) == ["t3"]
    [hit] = js("recall", "Lisbon", "--purpose", "support", "-k", "1", "--window", "1")["hits"]
    assert hit["key"] == "t1" and [t["key"] for t in hit["window"]] == ["t2"]
    human = efc("recall", "Lisbon", "--purpose", "support", "-k", "1", "--window", "1").stdout
    assert "window" in human and "which band was that" in human
    err = js("recall", "band", "--purpose", "support", "--after", "not a date", code=2)["error"]
    assert err["type"] == "InvalidInput" and "after" in err["message"]
    assert js("recall", "band", "--purpose", "support", "--window", "99", code=2)["error"]["type"] == "InvalidInput"


def test_a_claim_that_outlives_the_calendar_is_shown(efc, tmp_path, store_dir):
    """ttl=timedelta.max is a valid ttl (a claim kept for ever), but its expiry has no date:
    `efface read` and `forget` raised OverflowError rendering it, and so did the certificate's
    HTML. Now it reads "after 9999-12-31"."""
    import datetime as dt

    from efface.erasure.certificate import to_html

    with efface.open(store_dir, embedder="hashing") as s:
        s.write("k1", "Alice prefers tea", tenant="default", subject="alice", purpose="support", ttl=dt.timedelta.max)
        s.retain("k1", tenant="default", subject="alice", purpose="billing", basis="legal_hold", ttl=1e300)
    assert "after 9999-12-31" in efc("read", "k1", "--purpose", "support").stdout
    out = efc("forget", "--subject", "alice").stdout
    assert "after 9999-12-31" in out
    handle = re.search(r"efr_[0-9a-f]+", out).group(0)
    with efface.open(store_dir, embedder="hashing") as s:
        assert "after 9999-12-31" in to_html(s.certificate(handle))
    efc("ledger", "export", handle, "--html", str(tmp_path / "cert.html"))


def test_text_dash_reads_stdin(js):
    js("write", "k", "-", "--subject", "s", "--purpose", "support", input="from a pipe\n")
    assert js("read", "k", "--purpose", "support")["memory"]["text"] == "from a pipe\n"


def test_write_over_another_subjects_key_needs_replace(js, efc):
    """Like the library (docs/identifiers.md): refused with KeyInUse, nothing changed; with
    --replace the old record is erased by a receipt of kind 'replace' that verify proves."""
    js("write", "note", "Alice prefers green tea", "--subject", "alice", "--purpose", "support")
    err = js("write", "note", "Bob's plan", "--subject", "bob", "--purpose", "support", code=2)["error"]
    assert err["type"] == "KeyInUse" and "replace" in err["message"]
    assert js("read", "note", "--purpose", "support")["memory"]["text"] == "Alice prefers green tea"
    epoch = js("write", "note", "Bob's plan", "--subject", "bob", "--purpose", "support", "--replace")["epoch"]
    memory = js("read", "note", "--purpose", "support")["memory"]
    assert memory["text"] == "Bob's plan" and [c["subject"] for c in memory["claims"]] == ["bob"]
    (replaced,) = [r for r in js("receipts")["receipts"] if r["kind"] == "replace"]
    assert replaced["epoch"] == epoch
    js("wait", replaced["handle"])
    assert js("verify", replaced["handle"])["level"] == "erased"
    assert "--replace" in efc("write", "--help").stdout


def test_texts_and_keys_are_printed_as_data_not_markup(efc):
    key, text = "[red]k[/red]", "[bold]not bold[/] and a stray [/oops] tag"
    efc("write", key, text, "--subject", "s", "--purpose", "support")
    out = efc("read", key, "--purpose", "support").stdout
    assert key in out and text in out
    out = efc("recall", "bold stray tag", "--purpose", "support").stdout
    assert key in out and text in out
    assert key in efc("forget", "--key", key).stdout


def test_read_of_a_missing_record_exits_1(js, efc):
    js("write", "k", "text", "--subject", "s", "--purpose", "support")
    assert js("read", "other", "--purpose", "support", code=1) == {"found": False, "memory": None}
    result = efc("read", "other", "--purpose", "support", code=1)
    assert result.stdout == "" and "no live record" in result.stderr


def test_retain_then_forget_one_scope_says_what_is_kept(js, efc):
    key = "tenant:acme:session:42"
    js("write", key, "card ending 4242", "--subject", "carol", "--purpose", "session", "--ttl", str(7 * 86400))
    js(
        "retain",
        key,
        "--subject",
        "carol",
        "--purpose",
        "tenant-retention",
        "--basis",
        "contract",
        "--ttl",
        str(30 * 86400),
    )
    receipt = js("forget", "--prefix", "tenant:acme:session:", "--purpose", "session")
    assert receipt["erased"] == []
    assert [(r["key"], r["purpose"]) for r in receipt["released"]] == [(key, "session")]
    [kept] = receipt["retained"]
    assert (kept["key"], kept["purpose"], kept["basis"]) == (key, "tenant-retention", "contract")
    assert kept["expires_at"] is not None and kept["reason"]
    assert js("read", key, "--purpose", "session", code=1)["found"] is False
    assert js("read", key, "--purpose", "tenant-retention")["memory"]["text"] == "card ending 4242"

    human = efc("forget", "--key", key, "--purpose", "tenant-retention").stdout
    for word in ("handle", "epoch", "level", "intent", "released", "erased", key, "ann", "applied epoch"):
        assert word in human
    assert js("read", key, "--purpose", "tenant-retention", code=1)["found"] is False


def test_register_subject_and_forget_quarantines_a_digest_naming_them(js, efc):
    assert (
        js("register-subject", "alice", "--identifier", "Alice", "--identifier", "alice@example.com")["identifiers"]
        == 2
    )
    js("write", "acme:alice:1", "asked for a refund", "--subject", "alice", "--purpose", "support")
    js("write", "acme:digest", "digest: Alice asked for a refund", "--subject", "svc", "--purpose", "analytics")
    assert "acme:digest" in [h["key"] for h in js("recall", "alice", "--purpose", "analytics")["hits"]]
    receipt = js("forget", "--subject", "alice")
    assert receipt["erased"] == ["acme:alice:1"]
    assert receipt["quarantined"] == ["acme:digest"]
    assert [(d["key"], d["action"]) for d in receipt["derivations"]] == [("acme:digest", "quarantined")]
    assert "acme:digest" not in [h["key"] for h in js("recall", "alice", "--purpose", "analytics")["hits"]]
    assert js("read", "acme:alice:1", "--purpose", "support", code=1)["found"] is False


def test_receipt_status_wait(js, efc):
    js("write", "k1", "first memory", "--subject", "s", "--purpose", "support")
    receipt = js("forget", "--key", "k1")
    for field in (
        "handle",
        "epoch",
        "level",
        "released",
        "erased",
        "retained",
        "quarantined",
        "paths",
        "max_propagation_s",
    ):
        assert field in receipt
    assert receipt["level"] == "intent" and receipt["erased"] == ["k1"]
    # One-shot commands run no compactor: the vector index had not absorbed it at the acknowledgement.
    assert receipt["paths"]["ann"]["state"] == "pending"
    assert receipt["paths"]["ann"]["applied_epoch"] < receipt["epoch"]
    handle = receipt["handle"]

    status = js("status", handle)
    assert status["handle"] == handle and status["epoch"] == receipt["epoch"]
    assert status["counts"] == {"released": 1, "erased": 1, "retained": 0, "quarantined": 0}
    waited = js("wait", handle, "--timeout", "30")
    assert waited["settled"] is True and waited["pending_deletions"] == 0
    assert {p["state"] for p in waited["paths"].values()} == {"absorbed"}
    human = efc("wait", handle).stdout
    assert handle in human and "absorbed" in human and "settled" in human


def test_wait_exits_1_when_not_settled(js, monkeypatch):
    js("write", "k1", "first memory", "--subject", "s", "--purpose", "support")
    handle = js("forget", "--key", "k1")["handle"]
    real_wait = efface.Store.wait

    def never_done(self, handle, timeout=30.0, **kw):
        return dataclasses.replace(real_wait(self, handle, timeout, **kw), settled=False, erased=False)

    monkeypatch.setattr(efface.Store, "wait", never_done)
    assert js("wait", handle, "--timeout", "0", code=1)["erased"] is False
    assert js("wait", handle, "--timeout", "0", "--until", "absorbed", code=1)["settled"] is False


def test_verify_and_ledger_export(js, efc, store_dir, tmp_path):
    js(
        "write",
        "acme:secret-key",
        "Zelda Quist told us about her allergy to peanuts",
        "--subject",
        "subject-zelda",
        "--purpose",
        "support",
    )
    js("write", "other", "other text kept for someone else", "--subject", "s", "--purpose", "support")
    handle = js("forget", "--subject", "subject-zelda")["handle"]
    assert js("wait", handle)["erased"] is True
    doc = js("verify", handle)
    assert doc["level"] == "erased" and doc["receipt_level"] == "erased"
    assert {c["name"] for c in doc["checks"]} >= {"origin.by_id", "fts.by_text", "ann.by_neighbours", "bytes"}
    out, page = tmp_path / "cert.json", tmp_path / "cert.html"
    js("ledger", "export", handle, "--out", str(out), "--html", str(page))
    cert = json.loads(out.read_text())
    assert cert["level"] == "erased" and cert["handle"] == handle
    assert cert["ledger"]["chain"]["ok"] is True
    assert [v["level"] for v in cert["verifications"]][-1] == "erased"
    html = page.read_text()
    assert "Deletion certificate" in html and "erased" in html
    for secret in ("Zelda", "zelda", "peanuts", "secret-key"):
        assert secret not in html and secret not in out.read_text()
    # to stdout as one JSON document, and a typo'd handle is a clean error
    assert js("ledger", "export", handle)["handle"] == handle
    assert js("verify", "efr_nope", code=1)["error"]["type"] == "NotFound"


def test_ledger_export_html_prints_no_json(js, efc, tmp_path):
    """--html FILE also printed the whole JSON certificate on stdout (only --out took it
    away): what --html asks for is the page; the JSON goes to stdout only when neither file
    is named (and with --json, which always prints the one JSON document)."""
    js("write", "k1", "first memory", "--subject", "s", "--purpose", "support")
    handle = js("forget", "--key", "k1")["handle"]
    page = tmp_path / "cert.html"
    out = efc("ledger", "export", handle, "--html", str(page)).stdout
    assert "Deletion certificate" in page.read_text()
    assert '"handle"' not in out and "{" not in out and "written to" in out
    assert json.loads(efc("ledger", "export", handle).stdout)["handle"] == handle
    assert js("ledger", "export", handle, "--html", str(tmp_path / "two.html"))["handle"] == handle
    both = efc("ledger", "export", handle, "--html", str(page), "--out", str(tmp_path / "c.json"), "--overwrite").stdout
    assert "{" not in both and both.count("written to") == 2


def test_ledger_export_and_audit_refuse_an_existing_file_unless_overwrite(js, efc, tmp_path):
    """`ledger export --out/--html` and `audit --html` replaced an existing file without a
    word, where `backup` refuses one unless --overwrite: now all three refuse it (before any
    work, nothing written) unless --overwrite is given."""
    js("write", "k1", "first memory", "--subject", "s", "--purpose", "support")
    handle = js("forget", "--key", "k1")["handle"]
    out, page = tmp_path / "cert.json", tmp_path / "cert.html"
    out.write_text("someone's precious file")
    page.write_text("another precious file")
    new = str(tmp_path / "new.json")
    for args in (["--out", str(out)], ["--html", str(page)], ["--out", new, "--html", str(page)]):
        error = js("ledger", "export", handle, *args, code=2)["error"]
        assert error["type"] == "InvalidInput" and "exists already" in error["message"]
        assert "--overwrite" in error["message"]
        assert str(tmp_path) not in error["message"]
    assert out.read_text() == "someone's precious file" and page.read_text() == "another precious file"
    assert not (tmp_path / "new.json").exists()  # refused before anything was written
    js("ledger", "export", handle, "--out", str(out), "--html", str(page), "--overwrite")
    assert json.loads(out.read_text())["handle"] == handle and "Deletion certificate" in page.read_text()
    missing = js("ledger", "export", handle, "--out", str(tmp_path / "no" / "dir.json"), code=2)["error"]
    assert missing["type"] == "InvalidInput" and "could not be written" in missing["message"]
    store = tmp_path / "audited"
    with efface.open(store, embedder="hashing") as s:
        s.write("k1", "Alice prefers green tea", tenant="default", subject="alice", purpose="support")
    report = tmp_path / "report.html"
    report.write_text("an earlier report")
    r = efc("audit", "efface", str(store), "--subject", "alice", "--html", str(report), code=2)
    assert "exists already" in r.stderr and report.read_text() == "an earlier report"
    efc("audit", "efface", str(store), "--subject", "alice", "--html", str(report), "--overwrite")
    assert "<table>" in report.read_text()


def test_a_store_and_a_server_named_together_are_a_usage_error(runner, tmp_path):
    """--store DIR with --url URL silently used the server. Now it is a usage error that
    never repeats the URL (it may hold a password), whichever of them came from the
    environment."""
    url = "http://agent:hunter2-secret@127.0.0.1:9/"
    store = os.fspath(tmp_path / "s")
    for args, env in (
        (["--store", store, "--url", url], {}),
        (["--url", url], {"EFFACE_STORE": store}),
        (["--store", store], {"EFFACE_URL": url}),
        (["--origin", "postgresql://u:hunter2-secret@h/db", "--url", url], {}),
    ):
        r = runner.invoke(cli, [*args, "read", "k1", "--purpose", "support"], env=env)
        assert r.exit_code == 2, (args, r.output)
        assert "not both" in r.stderr and "hunter2" not in r.output + r.stderr
        r = runner.invoke(cli, [*args, "--json", "read", "k1", "--purpose", "support"], env=env)
        error = one_json(r)["error"]
        assert r.exit_code == 2 and error["type"] == "UsageError" and "hunter2" not in r.output
    assert not os.path.exists(store)  # nothing was opened


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--transport", "http"]])
def test_a_blank_host_is_refused_not_every_interface(runner, tmp_path, command, monkeypatch):
    """--host "" (a variable left unset) was taken: uvicorn binds "" to every interface, so
    the store was served to the network where the default serves this machine only. Now a
    usage error that says what to give; efface's own refusals keep their words (they were
    replaced by click's "must be a valid text")."""
    import uvicorn

    def never(*_args, **_kwargs):
        raise AssertionError("a server was started")

    monkeypatch.setattr(uvicorn, "run", never)
    monkeypatch.setattr(uvicorn.Server, "run", never)
    store = os.fspath(tmp_path / "s")
    for host in ("", "  "):
        r = runner.invoke(cli, ["--store", store, *command, "--host", host])
        assert r.exit_code == 2 and "must not be empty" in r.stderr and "127.0.0.1" in r.stderr
    r = runner.invoke(cli, ["--json", "--store", store, *command, "--host", ""])
    assert r.exit_code == 2 and one_json(r)["error"]["type"] == "BadParameter"
    assert not os.path.exists(store)  # refused before anything was opened
    r = runner.invoke(cli, ["--store", store, "--tenant", "", "read", "k", "--purpose", "support"])
    assert r.exit_code == 2 and "leave --tenant out for the default one" in r.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["mcp", "--port", "9000"], "go with --transport http"),
        (["mcp", "--transport", "stdio", "--keys", "ring.db"], "go with --transport http"),
        (["mcp", "--transport", "http", "--tenant", "acme"], "--tenant goes with --transport stdio"),
        (["--tenant", "acme", "serve"], "efface serve takes no --tenant"),
        (["--url", "http://u:pw@h:9", "serve"], "efface serve takes no --url"),
    ],
)
def test_efface_mcp_and_serve_refuse_options_they_do_not_use(runner, tmp_path, args, says, monkeypatch):
    """`efface mcp --port 9000` (stdio) and `--transport http --tenant acme` took the option
    and ignored it; the second read as if the server were limited to one tenant, where every
    API key's tenant is served. Now a usage error, before anything is opened."""
    import uvicorn

    import efface.service.mcp as service_mcp

    def never(*_args, **_kwargs):
        raise AssertionError("a server was started")

    monkeypatch.setattr(uvicorn, "run", never)
    monkeypatch.setattr(uvicorn.Server, "run", never)
    monkeypatch.setattr(service_mcp, "build_mcp", never)
    store = os.fspath(tmp_path / "s")
    r = runner.invoke(cli, ["--store", store, *args])
    assert r.exit_code == 2 and says in r.stderr and "pw@" not in r.stderr, r.output
    assert not os.path.exists(store)
    r = runner.invoke(cli, ["--store", store, "mcp", "--transport", "http"], env={"EFFACE_TENANT": "acme"})
    assert "--tenant goes with" not in r.stderr  # the environment's tenant is not this server's concern


def test_commands_on_the_store_files_offer_no_url(runner, tmp_path):
    """backup, restore, compact and sweep work on the store's own files (a client refuses
    them), yet their --help offered --url and --api-key. Now they take neither; a root --url
    with a store is the usage error, EFFACE_URL beside a store is not theirs to use."""
    for command in (["backup"], ["restore"], ["compact"], ["sweep"]):
        text = runner.invoke(cli, [*command, "--help"]).stdout
        assert "--store" in text and "--url" not in text and "--api-key" not in text, command
    for command in (["read"], ["forget"], ["ledger", "export"]):
        assert "--url" in runner.invoke(cli, [*command, "--help"]).stdout, command
    store, dest = os.fspath(tmp_path / "s"), os.fspath(tmp_path / "b.efb")
    r = runner.invoke(cli, ["--store", store, "--url", "http://u:hunter2@h:9", "backup", dest])
    assert r.exit_code == 2 and "not both" in r.stderr and "hunter2" not in r.output + r.stderr
    r = runner.invoke(
        cli, ["--store", store, "--embedder", "hashing", "backup", dest], env={"EFFACE_URL": "http://h:9"}
    )
    assert r.exit_code == 0, r.output
    assert os.path.isfile(dest)
    r = runner.invoke(cli, ["--json", "compact"], env={"EFFACE_URL": "http://h:9"})
    error = one_json(r)["error"]
    assert r.exit_code == 1 and error["type"] == "RemoteUnsupported" and "where the store is" in error["message"]


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--max-wait", "nan"],
        ["serve", "--max-wait", "inf"],
        ["gate", "proxy", "--settle", "nan", "--", "true"],
    ],
    ids=["max-wait-nan", "max-wait-inf", "settle-nan"],
)
def test_a_non_finite_number_is_a_usage_error(runner, store_dir, args):
    """NaN compares false with both bounds of click's FloatRange, so `--max-wait nan` was taken
    (and capped no wait: min(timeout, nan) is the timeout) and `--settle nan` settled nothing."""
    result = runner.invoke(cli, ["--json", "--store", store_dir, *args])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "BadParameter" and "range its --help gives" in error["message"]


def test_receipts_and_ledger(js, efc, store_dir):
    js("write", "acme:secret-key", "secret text", "--subject", "subject-zelda", "--purpose", "support")
    js("write", "other", "other text", "--subject", "s", "--purpose", "support")
    h1 = js("forget", "--key", "acme:secret-key")["handle"]
    h2 = js("forget", "--subject", "s")["handle"]
    # Another tenant's receipt is listed only with --all-tenants.
    js("--tenant", "globex", "write", "g", "globex text", "--subject", "s", "--purpose", "support")
    h3 = js("--tenant", "globex", "forget", "--key", "g")["handle"]

    listed = js("receipts")["receipts"]
    assert [r["handle"] for r in listed] == [h1, h2]
    assert [r["handle"] for r in js("receipts", "--all-tenants")["receipts"]] == [h1, h2, h3]
    dumped = json.dumps(listed)
    assert "secret-key" not in dumped and "subject-zelda" not in dumped and "secret text" not in dumped
    assert h1 in efc("receipts").stdout

    entries = js("ledger", "list")["entries"]
    assert [e["handle"] for e in entries] == [h1, h2, h3]
    assert js("ledger")["entries"] == entries
    assert js("ledger", "verify") == {"ok": True, "entries": 3, "problems": []}
    assert "intact" in efc("ledger", "verify").stdout

    conn = apsw.Connection(os.path.join(store_dir, "origin.db"))
    try:
        conn.execute("UPDATE ledger SET at = at + 1 WHERE seq = 2")
    finally:
        conn.close()
    check = js("ledger", "verify", code=1)
    assert check["ok"] is False and any("seq 2" in p for p in check["problems"])
    assert "BROKEN" in efc("ledger", "verify", code=1).stdout


def test_compact_and_sweep(js, efc):
    js("write", "keep", "kept memory", "--subject", "s", "--purpose", "support")
    js("write", "brief", "short-lived memory", "--subject", "s", "--purpose", "support", "--ttl", "0.001")
    doc = js("compact")
    assert doc["epoch"] == doc["stats"]["epoch"]
    assert {p["state"] for p in doc["stats"]["paths"].values()} == {"absorbed"}
    assert "every read path at epoch" in efc("compact").stdout
    # The claim was written with a 1 ms TTL, and a whole CLI run has happened since.
    [expiry] = js("sweep")["receipts"]
    assert expiry["kind"] == "expire" and expiry["erased"] == ["brief"]
    assert js("sweep")["receipts"] == []
    assert "nothing was due" in efc("sweep").stdout
    assert js("read", "keep", "--purpose", "support")["found"] is True


# -- options and the environment -----------------------------------------------------------------
def test_common_options_before_or_after_the_command(runner, store_dir):
    args = ["write", "k", "t", "--subject", "s", "--purpose", "support"]
    first = runner.invoke(cli, ["--json", "--store", store_dir, "--embedder", "hashing", *args])
    second = runner.invoke(cli, [*args, "--json", "--store", store_dir])
    assert first.exit_code == second.exit_code == 0
    assert one_json(first)["epoch"] < one_json(second)["epoch"]


def test_store_and_tenant_from_the_environment(store_dir):
    runner = CliRunner(env={"EFFACE_STORE": store_dir, "EFFACE_TENANT": "acme", "COLUMNS": "200"})
    result = runner.invoke(
        cli, ["--embedder", "hashing", "--json", "write", "k", "t", "--subject", "s", "--purpose", "support"]
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    read = runner.invoke(cli, ["--json", "read", "k", "--purpose", "support"])
    assert one_json(read)["memory"]["tenant"] == "acme"
    # The command line wins over the environment: tenant t2 has never written under 'support'.
    other = runner.invoke(cli, ["--json", "read", "k", "--purpose", "support", "--tenant", "t2"])
    assert other.exit_code == 2 and one_json(other)["error"]["type"] == "UnknownPurpose"


def test_missing_store_is_a_clear_error(runner):
    result = runner.invoke(cli, ["read", "k", "--purpose", "support"])
    assert result.exit_code == 2
    assert "pass --store DIR or set EFFACE_STORE" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    result = runner.invoke(cli, ["--json", "read", "k", "--purpose", "support"])
    assert result.exit_code == 2
    assert "pass --store DIR or set EFFACE_STORE" in one_json(result)["error"]["message"]


# -- errors -> exit codes ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, code, kind",
    [
        (["forget"], 2, "ScopeError"),
        (["read", "k", "--purpose", "no-such-purpose"], 2, "UnknownPurpose"),
        (["write", "k2", "t", "--subject", "s", "--purpose", "support", "--basis", "whim"], 2, "UnknownBasis"),
        (["write", "k2", "t", "--subject", "s", "--purpose", "support", "--metadata", "{oops"], 2, "InvalidInput"),
        (["write", "k2", "t", "--subject", "s", "--purpose", "support", "--metadata", "[1]"], 2, "InvalidInput"),
        (["write", "k2", "   ", "--subject", "s", "--purpose", "support"], 2, "InvalidInput"),
        (["write", "k2", "t", "--subject", "s", "--purpose", "support", "--ttl", "-5"], 2, "InvalidInput"),
        (["recall", "q", "--purpose", "support", "-k", "0"], 2, "InvalidInput"),
        (["retain", "missing", "--subject", "s", "--purpose", "support", "--basis", "consent"], 1, "NotFound"),
        (["status", "efr_nope"], 1, "NotFound"),
        (["wait", "efr_nope"], 1, "NotFound"),
        (["read", "k"], 2, "MissingParameter"),
        (["no-such-command"], 2, "NoSuchCommand"),
    ],
)
def test_errors_map_to_exit_codes_without_traceback(efc, js, args, code, kind):
    js("write", "k", "text", "--subject", "s", "--purpose", "support")
    doc = js(*args, code=code)
    assert set(doc) == {"error"} and doc["error"]["type"] == kind and doc["error"]["message"]
    result = efc(*args, code=code)
    assert result.stdout == ""
    assert "Error" in result.stderr and "Traceback" not in result.stderr


def test_error_messages_do_not_echo_input(efc, js):
    js("write", "k", "text", "--subject", "s", "--purpose", "support")
    result = efc("read", "k", "--purpose", "purpose-Zebulon", code=2)
    assert "Zebulon" not in result.stderr


def test_a_store_held_by_another_process_is_exit_1(efc, store_dir):
    efc("write", "k", "text", "--subject", "s", "--purpose", "support")
    with efface.open(store_dir, embedder="hashing", background=False):
        result = efc("read", "k", "--purpose", "support", "--json", code=1)
    assert one_json(result)["error"]["type"] == "StoreLocked"


def test_another_embedder_than_the_stores_is_exit_1(runner, efc, store_dir):
    efc("write", "k", "text", "--subject", "s", "--purpose", "support")
    result = runner.invoke(cli, ["--store", store_dir, "--embedder", "minilm", "read", "k", "--purpose", "support"])
    assert result.exit_code == 1
    assert "embedder" in result.stderr and "Traceback" not in result.stderr


# -- --json prints one document for every command ------------------------------------------------------
def test_every_command_prints_one_json_document(js):
    docs = [
        js("register-subject", "alice", "--identifier", "Alice"),
        js("write", "k1", "Alice asked about tea", "--subject", "alice", "--purpose", "support"),
        js("retain", "k1", "--subject", "alice", "--purpose", "audit", "--basis", "legal_hold"),
        js("read", "k1", "--purpose", "support"),
        js("recall", "tea", "--purpose", "support"),
    ]
    receipt = js("forget", "--subject", "alice")
    assert receipt["retained"][0]["basis"] == "legal_hold"  # legal_hold outranks a forget not naming it
    docs += [
        receipt,
        js("status", receipt["handle"]),
        js("wait", receipt["handle"]),
        js("receipts"),
        js("ledger"),
        js("ledger", "list"),
        js("ledger", "verify"),
        js("compact"),
        js("sweep"),
    ]
    assert all(isinstance(d, dict) and "error" not in d for d in docs)


# -- help and docs ---------------------------------------------------------------------------------------------
def _commands(group: click.Group, prefix: str = ""):
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from _commands(command, path + " ")


ALL_COMMANDS = list(_commands(cli))


def test_the_command_list_is_what_the_brief_names():
    names = {path for path, _ in ALL_COMMANDS}
    assert {
        "write",
        "retain",
        "register-subject",
        "read",
        "recall",
        "forget",
        "status",
        "wait",
        "receipts",
        "ledger",
        "ledger list",
        "ledger verify",
        "compact",
        "demo",
    } <= names


@pytest.mark.parametrize("path, command", ALL_COMMANDS, ids=[p for p, _ in ALL_COMMANDS])
def test_every_command_and_option_has_help(runner, path, command):
    assert command.help and command.help.strip(), f"efface {path} has no help"
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help and param.help.strip(), f"efface {path} {param.opts[0]} has no help"
    result = runner.invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0 and "Usage: efface " + path in result.stdout


def test_root_options_have_help():
    assert all(p.help for p in cli.params if isinstance(p, click.Option))


@pytest.mark.parametrize("path", [p for p, _ in ALL_COMMANDS])
def test_every_command_is_documented_in_the_readme(path):
    readme = README.read_text(encoding="utf-8")
    assert "## CLI" in readme
    cli_section = readme.split("## CLI", 1)[1]
    assert re.search(rf"`efface {re.escape(path)}[ `]", cli_section), f"efface {path} is not in README's CLI section"


def test_help_points_at_the_concepts_the_repository_holds(runner):
    """`efface --help` names docs/concepts.md (what efface promises), a file every clone has."""
    out = " ".join(runner.invoke(cli, ["--help"]).stdout.split())
    assert "docs/concepts.md" in out and "intent -> unreadable -> erased" in out
    assert (README.parent / "docs" / "concepts.md").is_file()
    assert "DESIGN" not in out


def test_python_dash_m_efface_help():
    result = subprocess.run([sys.executable, "-m", "efface", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: efface ")
    for name in ("write", "forget", "ledger", "demo"):
        assert name in result.stdout


def test_quarantine_and_policy_commands(efc):
    efc("register-subject", "alice", "--identifier", "Alice Martin", "--identifier", "alice@example.com")
    efc("write", "a1", "Alice Martin wants tea", "--subject", "alice", "--purpose", "support")
    efc("write", "d1", "digest: Alice Martin called", "--subject", "svc", "--purpose", "analytics")
    efc("write", "s1", "summary of a1", "--subject", "svc", "--purpose", "analytics", "--source", "a1")
    receipt = one_json(efc("--json", "forget", "--subject", "alice"))
    assert receipt["quarantined"] == ["d1", "s1"]
    assert {d["key"]: d["why"] for d in receipt["derivations"]} == {"d1": "mention", "s1": "lineage"}
    listed = one_json(efc("--json", "quarantine"))["quarantined"]
    assert [(i["key"], i["why"], i["sources"]) for i in listed] == [
        ("d1", "mention", []),
        ("s1", "lineage", ["erased:" + receipt["handle"]]),  # the erased key itself is not kept
    ]
    efc("read", "d1", "--purpose", "analytics", code=1)
    efc("quarantine", "rederive", "d1", "digest: a customer called", "--no-sources")
    assert "a customer called" in efc("read", "d1", "--purpose", "analytics").stdout
    efc("quarantine", "release", "s1", code=2)  # --reason is required
    efc("quarantine", "release", "s1", "--reason", "reviewed: no personal data")
    assert one_json(efc("--json", "quarantine", "list"))["quarantined"] == []
    efc("quarantine", "release", "s1", "--reason", "again", code=1)  # nothing quarantined: NotFound
    efc("policy", "keep", code=2)  # keep needs a reason
    assert one_json(efc("--json", "policy", "redact"))["policy"] == "redact"
    kinds = [e["kind"] for e in one_json(efc("--json", "ledger"))["entries"]]
    assert kinds == ["forget", "rederive", "release", "policy"]
