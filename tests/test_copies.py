"""Every copy's state on the receipt, the status and the verification (issue #34 item 3;
docs/evidence-ladder.md, "Copies"): the level stays one of intent, unreadable, erased, and is
``erased`` only when every copy is ``erased`` or ``shredded``, on every origin and over HTTP.
Before a verification a copy is ``pending`` or ``unchecked``, never ``erased`` by assumption."""

from __future__ import annotations

import json

from pydantic import TypeAdapter

import efface
from efface.erasure import copies
from efface.model import (
    COPY_STATES,
    FINAL_COPY_STATES,
    NOT_YET_STATES,
    CopyState,
    Receipt,
    Status,
    Verification,
    allows_erased,
)

HTTP_CONTRACT = True  # the contract's http backend too: a real server and efface.Client
T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle in the north annex"
OTHER = "Ottoline Brackwater collects copper weathervanes by the harbour"


def _holds(level: str, found: dict[str, CopyState]) -> None:
    """The ladder's rule for copies, and no copy claimed erased without a check."""
    assert found, "every receipt, status and verification names its copies"
    assert level in ("intent", "unreadable", "erased")
    for name, c in found.items():
        assert c.state in COPY_STATES + NOT_YET_STATES, (name, c)
        assert c.reason
        if c.state == "erased":
            assert c.checked_at is not None, f"{name}: erased without a verification that checked it"
    if level == "erased":
        assert allows_erased(found), {k: c.state for k, c in found.items()}


def test_each_copy_climbs_with_the_erasure_and_erased_needs_every_copy(open_store, backend):
    s = open_store()
    s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
    s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
    receipt = s.forget(tenant=T, subject="zq")
    _holds(receipt.level, dict(receipt.copies))
    assert receipt.level == "intent"
    assert {c.state for c in receipt.copies.values()} == {"pending"}, receipt.copies
    local = "cache" if backend == "postgres" else "store"
    assert local in receipt.copies
    if backend == "postgres":
        assert {"postgres.primary.files", "postgres.primary.wal"} <= set(receipt.copies)
    assert receipt.to_dict()["copies"][local]["state"] == "pending"

    st = s.status(receipt.handle)
    _holds(st.level, dict(st.copies))
    assert set(st.copies) == set(receipt.copies) and st.to_dict()["copies"][local]["state"] == "pending"

    early = s.verify(receipt.handle)  # before the compactor's work: nothing scanned yet
    _holds(early.level, dict(early.copies))
    assert early.level == "unreadable" and not allows_erased(early.copies)
    st = s.status(receipt.handle)  # what the verification found, nothing having moved since
    _holds(st.level, dict(st.copies))
    assert {k: c.state for k, c in st.copies.items()} == {k: c.state for k, c in early.copies.items()}

    st = s.wait(receipt.handle, 60, until="erased")
    assert st.erased
    _holds(st.level, dict(st.copies))
    assert st.level == "unreadable"
    assert "pending" not in {c.state for c in st.copies.values()}
    for name, c in st.copies.items():  # not final at the early verify: now waiting for the next one
        if early.copies[name].state not in FINAL_COPY_STATES:
            assert c.state == "unchecked" and c.checked_at is None, (name, c)

    v = s.verify(receipt.handle)
    _holds(v.level, dict(v.copies))
    assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
    st = s.status(receipt.handle)
    _holds(st.level, dict(st.copies))
    assert st.level == "erased"
    assert {k: (c.state, c.checked_at) for k, c in st.copies.items()} == {
        k: (c.state, c.checked_at) for k, c in v.copies.items()
    }
    again = s.verify(receipt.handle)  # the byte check recorded: still every copy final
    _holds(again.level, dict(again.copies))
    assert again.level == "erased"
    _holds(s.status(receipt.handle).level, dict(s.status(receipt.handle).copies))


def test_receipt_status_and_verification_carry_their_copies_over_the_wire(tmp_path):
    """What the HTTP service sends (pydantic's JSON of the dataclasses) and the client rebuilds."""
    with efface.open(str(tmp_path / "s"), embedder="hashing", background=False) as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        status = s.wait(receipt.handle, 30)
        v = s.verify(receipt.handle)
    for value, kind in ((receipt, Receipt), (status, Status), (v, Verification)):
        wire = TypeAdapter(kind)
        back = wire.validate_json(wire.dump_json(value))
        assert back.copies == value.copies
        assert json.loads(wire.dump_json(value))["copies"] == value.to_dict()["copies"]
    assert receipt.copies["store"].state == "pending" and status.copies["store"].state == "unchecked"
    # a reader of an older server's JSON (no copies) still rebuilds the value
    old = {k: v for k, v in receipt.to_dict().items() if k != "copies"}
    assert TypeAdapter(Receipt).validate_python(old).copies == {}


# -- the rules of efface.erasure.copies, unit by unit ----------------------------------------------
NAMES = copies.Names("cache", ("postgres.primary.files", "postgres.primary.wal", "postgres.replica.r1"))


def _found(**states: str) -> dict[str, CopyState]:
    return {k.replace("_", "."): CopyState(v, f"{v} here", 100.0) for k, v in states.items()}


def test_at_acknowledgement_every_copy_is_pending_and_backups_as_decided():
    got = copies.at_ack(NAMES, "shredded")
    assert {k: c.state for k, c in got.items()} == {
        "cache": "pending",
        "postgres.primary.files": "pending",
        "postgres.primary.wal": "pending",
        "postgres.replica.r1": "pending",
        "backups": "shredded",
    }
    assert copies.at_ack(copies.Names("store"), "ledger-replay")["backups"].state == "cannot_verify"
    assert "backups" not in copies.at_ack(copies.Names("store"), None)


def test_which_copies_the_work_has_reached():
    epochs = {"origin": 5, "fts": 7, "ann": 4}
    assert copies.reached(copies.Names("store"), epochs, 5) == {"store": False}  # ann behind
    assert copies.reached(copies.Names("store"), epochs, 4) == {"store": True}
    got = copies.reached(copies.Names("cache", ("postgres.primary.files",)), {"origin": 3, "fts": 9}, 5)
    assert got == {"cache": True, "postgres.primary.files": False}  # the cache does not wait for the server


def test_a_status_shows_what_the_verification_found_while_it_still_holds():
    found = _found(cache="erased", postgres_primary_files="present", postgres_primary_wal="cannot_verify")
    found["postgres.replica.r1"] = CopyState("cannot_verify", "its own host", 100.0)
    before = copies.recorded("unreadable", 100.0, found, {"cache": True})
    behind = {"origin": 1, "fts": 9}
    got = copies.now("unreadable", NAMES, behind, 5, None, before)
    assert got == found  # the maintenance has not run since: still as found
    ahead = {"origin": 9, "fts": 9}
    got = copies.now("unreadable", NAMES, ahead, 5, None, before)
    assert got["cache"].state == "erased"  # final: stays
    assert {got[n].state for n in NAMES.server} == {"unchecked"}  # the maintenance ran since the scan
    after = copies.recorded("unreadable", 100.0, found, dict.fromkeys(["cache", *NAMES.server], True))
    got = copies.now("unreadable", NAMES, ahead, 5, None, after)
    assert got["postgres.primary.files"].state == "present"  # scanned after the maintenance: still there
    gone = copies.now("unreadable", copies.Names("cache", NAMES.server[:2]), ahead, 5, None, after)
    assert gone["postgres.replica.r1"].state == "cannot_verify"  # detached since: as it was found


def test_a_status_at_erased_shows_only_final_copies_even_for_an_older_proof():
    proven = copies.recorded("erased", 100.0, _found(store="erased", backups="shredded"), {"store": True})
    got = copies.now("erased", copies.Names("store"), {}, 5, "ledger-replay", proven)
    assert allows_erased(got) and got["backups"].state == "shredded"
    # a receipt proven erased by an efface that kept no copies on it: the ledger's proof
    proof = {"seq": 7, "at": 50.0, "body": json.dumps({"level": "erased", "copies": {"store": {"state": "erased"}}})}
    got = copies.now("erased", copies.Names("store"), {}, 5, None, None, proof)
    assert got == {"store": CopyState("erased", "", None)}
    older = {"seq": 7, "at": 50.0, "body": json.dumps({"level": "erased"})}
    got = copies.now("erased", copies.Names("store"), {}, 5, None, None, older)
    assert got["store"].state == "erased" and "ledger seq 7" in got["store"].reason and got["store"].checked_at == 50.0
    for level in ("intent", "unreadable"):
        assert not allows_erased(copies.now(level, copies.Names("store"), {"origin": 0}, 5, None, None))


def test_the_cli_shows_every_copy_on_forget_status_and_verify(tmp_path):
    from click.testing import CliRunner

    from efface.cli import cli

    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "COLUMNS": "200"})
    base = ["--store", str(tmp_path / "s"), "--embedder", "hashing", "--tenant", T]

    def run(*args: str, code: int = 0):
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
        return result.stdout

    run("write", "n1", TEXT, "--subject", "zq", "--purpose", "support")
    receipt = json.loads(run("forget", "--subject", "zq", "--json"))
    assert receipt["copies"]["store"]["state"] == "pending" and receipt["copies"]["store"]["checked_at"] is None
    table = run("status", receipt["handle"])
    assert "Copies" in table and "pending" in table
    run("wait", receipt["handle"])
    shown = run("verify", receipt["handle"])
    assert "Copies" in shown and "erased" in shown
    status = json.loads(run("status", receipt["handle"], "--json"))
    assert status["level"] == "erased" and status["copies"]["store"]["state"] == "erased"
    assert "Copies at acknowledgement" in run("forget", "--key", "nothing-here")  # a receipt as tables
