"""Tenant names are personal data, and keyed hashes encode their fields unambiguously (docs/concepts.md §8).

A per-user tenant is often named by an e-mail: efface keeps the name in one place only (the
origin's tenant table), stands a keyed hash in for it everywhere else, and erases the name
with the tenant's last record, subject and data key, so ``forget(tenant=..., everything=True)``
can reach ``erased``. Keyed hashes length-prefix their parts, so tenant ``a\\x1fb`` with key
``c`` and tenant ``a`` with key ``b\\x1fc`` never share one (a restore would skip a record
never erased, the ledger would conflate two records).
"""

from __future__ import annotations

import os

import pytest

from efface.errors import InvalidInput, NotFound, ScopeError
from efface.gate.state import GateState
from efface.service.keys import KeyRing, key_path
from test_backup import lose_everything

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

USER = "ana.perez@mail.example"
OTHER = "bo.lindqvist@mail.example"


def _fill(store, tenant: str) -> None:
    store.register_subject("ana", tenant=tenant, identifiers=["Ana Perez"])
    store.write("n1", "prefers green tea in the morning meetings", tenant=tenant, subject="ana", purpose="support")
    store.write(
        "n2", "asked for the invoice of the last quarter again", tenant=tenant, subject="ana", purpose="billing"
    )
    store.write("n3", "the ticket about the broken umbrella stand", tenant=tenant, subject="carl", purpose="support")


def _store_files(store) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(store.path) for f in names)


def _files_holding(store, needle: bytes) -> list[str]:
    found = []
    for path in _store_files(store):
        with open(path, "rb") as f:
            if needle in f.read():
                found.append(os.path.relpath(path, store.path))
    return found


# -- item 7: keyed hashes ------------------------------------------------------------------
def test_keyed_hash_parts_are_length_prefixed():
    from efface.keyed_hash import encode, keyed_hash

    secret = b"k" * 32
    assert encode("a\x1fb", "c") != encode("a", "b\x1fc")
    assert keyed_hash(secret, "key", "a\x1fb", "c") != keyed_hash(secret, "key", "a", "b\x1fc")
    assert keyed_hash(secret, "key", "a|b", "c") != keyed_hash(secret, "key", "a", "b|c")
    assert keyed_hash(secret, "ab", "") != keyed_hash(secret, "a", "b")
    assert keyed_hash(secret, "x", "y") == keyed_hash(secret, "x", "y")  # stable


def test_gate_hashes_do_not_collide_across_separators(tmp_path):
    gate = GateState(tmp_path / "gate.db")
    assert gate.hash("scope", "a\x1fb", "c") != gate.hash("scope", "a", "b\x1fc")


@pytest.mark.local_only(reason="calls the store's keyed hash, which lives in the server's process")
def test_store_hashes_do_not_collide_across_separators(store):
    assert store._hash("key", "a\x1fb", "c") != store._hash("key", "a", "b\x1fc")


def test_ledger_keeps_two_separator_sharing_pairs_apart(store):
    store.write("c", "first memory of the pair", tenant="a\x1fb", subject="s", purpose="support")
    store.write("b\x1fc", "second memory of the pair", tenant="a", subject="s", purpose="support")
    one = store.forget(tenant="a\x1fb", key="c")
    two = store.forget(tenant="a", key="b\x1fc")
    tenants = ("a\x1fb", "a")  # one by one: a served store shows a key its own tenant's only
    kept = {r["handle"]: r["body"] for t in tenants for r in store.receipts(t)}
    assert kept[one.handle]["erased"] != kept[two.handle]["erased"]
    assert kept[one.handle]["selector"]["tenant_h"] != kept[two.handle]["selector"]["tenant_h"]
    bodies = [e["body"] for t in tenants for e in store.ledger(t) if e["handle"] in (one.handle, two.handle)]
    assert len(bodies) == 2 and bodies[0] != bodies[1]


@pytest.mark.local_only(reason="backup and restore work on the store's files, where the store is")
def test_restore_does_not_skip_a_record_whose_hash_shared_a_separator(store, tmp_path):
    store.write("c", "the record that was never erased", tenant="a\x1fb", subject="s", purpose="support")
    store.write("b\x1fc", "the record that is forgotten", tenant="a", subject="t", purpose="support")
    store.backup(tmp_path / "b.efb")
    store.forget(tenant="a", key="b\x1fc")
    lose_everything(store, "a\x1fb")
    assert store.read("c", tenant="a\x1fb", purpose="support") is None
    result = store.restore(tmp_path / "b.efb")
    assert result.restored == 1 and result.replayed == 0
    back = store.read("c", tenant="a\x1fb", purpose="support")
    assert back is not None and back.text == "the record that was never erased" and back.tenant == "a\x1fb"
    assert store.read("b\x1fc", tenant="a", purpose="support") is None


# -- item 5: tenant names ------------------------------------------------------------------
def test_forget_everything_erases_the_whole_tenant_and_only_it(store):
    _fill(store, USER)
    _fill(store, OTHER)
    assert store.read("n1", tenant=USER, purpose="support").tenant == USER
    receipt = store.forget(tenant=USER, everything=True)
    assert sorted(receipt.erased) == ["n1", "n2", "n3"]
    assert receipt.selector.tenant == USER and receipt.selector.everything
    assert receipt.to_dict()["selector"] == {"tenant": USER, "everything": True}
    assert receipt.identifiers_erased and receipt.tenant_erased
    for key, purpose in (("n1", "support"), ("n2", "billing"), ("n3", "support")):
        assert store.read(key, tenant=USER, purpose=purpose) is None
        assert store.read(key, tenant=OTHER, purpose=purpose) is not None
    assert store.recall("green tea", tenant=USER, purpose="support") == []
    assert [h.key for h in store.recall("green tea", tenant=OTHER, purpose="support")][:1] == ["n1"]
    # The other tenant's subject and identifiers stay: a forget of ana there still erases them.
    assert store.forget(tenant=OTHER, subject="ana").identifiers_erased


def test_receipts_of_an_erased_tenant_stay_reachable_by_handle(store):
    _fill(store, USER)
    first = store.forget(tenant=USER, key="n3")
    assert not first.tenant_erased  # records and subjects are left
    last = store.forget(tenant=USER, everything=True)
    for handle in (first.handle, last.handle):
        assert store.status(handle, tenant=USER).handle == handle
        assert store.wait(handle, timeout=30, tenant=USER).erased
        assert store.verify(handle, tenant=USER).level == "erased"
        with pytest.raises(NotFound):
            store.status(handle, tenant=OTHER)
    assert [r["handle"] for r in store.receipts(tenant=USER)] == [first.handle, last.handle]
    # The tenant can start again under the same name.
    store.write("n9", "a new start after the erasure", tenant=USER, subject="ana", purpose="support")
    assert store.read("n9", tenant=USER, purpose="support").tenant == USER


def test_forget_everything_keeps_legal_holds_and_the_name_with_them(store):
    store.write("h1", "an invoice kept by law for years", tenant=USER, subject="ana", purpose="tax", basis="legal_hold")
    store.write("n1", "prefers green tea in the morning", tenant=USER, subject="ana", purpose="support")
    receipt = store.forget(tenant=USER, everything=True)
    assert receipt.erased == ("n1",)
    assert [r.key for r in receipt.retained] == ["h1"]
    assert not receipt.tenant_erased
    assert store.read("h1", tenant=USER, purpose="tax") is not None
    assert store.forget(tenant=USER, purpose="tax").tenant_erased


def test_the_last_key_forget_or_expiry_erases_the_name_too(store, clock):
    store.write("k1", "the only memory of this tenant", tenant=USER, subject="ana", purpose="support")
    assert store.forget(tenant=USER, key="k1").tenant_erased
    store.write("k2", "a memory that expires soon", tenant=OTHER, subject="bo", purpose="support", ttl=60)
    clock.advance(61)
    (expiry,) = store.sweep()
    assert expiry.kind == "expire" and expiry.erased == ("k2",)
    assert expiry.selector.tenant == OTHER and expiry.tenant_erased


def test_forget_everything_is_a_keyword_alone(store):
    store.write("k1", "a memory", tenant=USER, subject="ana", purpose="support")
    with pytest.raises(ScopeError) as err:
        store.forget(tenant=USER)
    assert "everything=True" in str(err.value) and USER not in str(err.value)
    with pytest.raises(ScopeError):
        store.forget(tenant=USER, subject="ana", everything=True)
    with pytest.raises(InvalidInput):
        store.forget(tenant=USER, everything="yes")
    assert store.read("k1", tenant=USER, purpose="support") is not None


# -- bytes: the name is in one table, then in no file --------------------------------------
@pytest.mark.sqlite_only("reads the origin's tables and scans the store's files")
def test_tenant_name_is_kept_in_the_tenant_table_only(store, tmp_path):
    from conftest import raw_db

    _fill(store, USER)
    store.set_policy(USER, "redact")
    store.forget(tenant=USER, key="n3")
    store.backup(tmp_path / "b.efb")
    store.compact()
    db = raw_db(store)
    holding = []
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        cols = [c[1] for c in db.execute(f"PRAGMA table_info('{table}')")]
        for col in cols:
            n = db.execute(f'SELECT count(*) FROM "{table}" WHERE instr(CAST("{col}" AS BLOB), ?)', (USER.encode(),))
            if n.fetchone()[0]:
                holding.append(f"{table}.{col}")
    assert holding == ["tenants.name"]
    with open(tmp_path / "b.efb", "rb") as f:
        assert USER.encode() not in f.read()  # in the backup only inside frames sealed by subject keys
    ann = [n for n in os.listdir(os.path.join(store.path, "ann"))]
    assert ann and not any(USER in n or "ana.perez" in n for n in ann)


@pytest.mark.sqlite_only("scans the bytes of the store's files")
def test_after_forget_everything_the_name_is_in_no_file_and_verify_proves_it(store):
    _fill(store, USER)
    _fill(store, OTHER)
    store.compact()
    assert _files_holding(store, USER.encode())
    receipt = store.forget(tenant=USER, everything=True)
    assert store.wait(receipt.handle, timeout=60).erased
    result = store.verify(receipt.handle, tenant=USER)
    assert result.level == "erased", [c.to_dict() for c in result.checks]
    bytes_check = next(c for c in result.checks if c.name == "bytes")
    assert "tenant" in bytes_check.detail  # the name was fingerprinted and not found
    assert _files_holding(store, USER.encode()) == []
    assert _files_holding(store, OTHER.encode())  # the other tenant is untouched
    assert store.read("n1", tenant=OTHER, purpose="support") is not None


@pytest.mark.sqlite_only("the API key ring is a file beside the store directory")
def test_the_key_ring_keeps_a_tenant_name_only_while_a_key_lives(store):
    """The ring is outside the store's files (verify does not scan it): it keeps each live
    key's tenant name, and revoking the key removes the name from its bytes, WAL included."""
    _fill(store, USER)
    path = key_path(store.path)
    assert not path.startswith(os.path.join(store.path, ""))  # beside the directory, not in it
    with KeyRing(path) as ring:
        _token, api_key = ring.create(USER)
        receipt = store.forget(tenant=USER, everything=True)
        store.wait(receipt.handle, timeout=60)
        assert store.verify(receipt.handle, tenant=USER).level == "erased"

        def ring_bytes() -> bytes:
            return b"".join(open(f, "rb").read() for f in (path, path + "-wal") if os.path.exists(f))

        assert USER.encode() in ring_bytes()  # the live key still acts for the tenant
        ring.revoke(api_key.id)
        assert USER.encode() not in ring_bytes()


def test_cli_forget_everything(tmp_path):
    import json

    from click.testing import CliRunner

    from efface.cli import cli

    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "COLUMNS": "200"})
    base = ["--store", str(tmp_path / "s"), "--embedder", "hashing"]
    wrote = runner.invoke(
        cli, [*base, "write", "n1", "prefers green tea", "--tenant", USER, "--subject", "ana", "--purpose", "support"]
    )
    assert wrote.exit_code == 0, wrote.output
    refused = runner.invoke(cli, [*base, "forget", "--tenant", USER])
    assert refused.exit_code != 0 and "everything" in refused.output and USER not in refused.output
    done = runner.invoke(cli, [*base, "forget", "--everything", "--tenant", USER, "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert doc["erased"] == ["n1"] and doc["tenant_erased"] and doc["selector"]["everything"] is True


@pytest.mark.sqlite_only("deletes the origin's rows behind the store's back, as a disaster would")
def test_restore_brings_the_name_back_so_it_can_be_erased_again(store, tmp_path):
    from conftest import raw_db

    _fill(store, USER)
    store.backup(tmp_path / "b.efb")
    lose_everything(store)
    db = raw_db(store)
    with db:
        db.execute("DELETE FROM subjects")
        db.execute("DELETE FROM tenants")
    result = store.restore(tmp_path / "b.efb")
    assert result.restored == 3
    assert [r[0] for r in raw_db(store).execute("SELECT name FROM tenants")] == [USER]
    receipt = store.forget(tenant=USER, everything=True)
    assert receipt.tenant_erased
    store.wait(receipt.handle, timeout=60)
    assert store.verify(receipt.handle, tenant=USER).level == "erased"
    assert _files_holding(store, USER.encode()) == []
