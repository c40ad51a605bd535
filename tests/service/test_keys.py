"""The key ring (service/keys.py) and `efface keys`: one tenant per key, only hashes kept,
revocation at once, and the CLI works beside a running server without opening the store."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from click.testing import CliRunner

from efface.cli import cli
from efface.errors import InvalidInput, NotFound
from efface.service.keys import KeyRing, key_path


def test_create_resolve_list_revoke(tmp_path):
    with KeyRing(tmp_path / "keys.db") as ring:
        token, key = ring.create("acme", label="bot")
        other, _ = ring.create("globex")
        assert token.startswith("efk_") and key.tenant == "acme" and key.label == "bot"
        assert ring.resolve(token) == "acme" and ring.resolve(other) == "globex"
        assert [k.id for k in ring.list(tenant="acme")] == [key.id]
        assert ring.revoke(key.id).id == key.id
        assert ring.resolve(token) is None
        with pytest.raises(NotFound):
            ring.revoke(key.id)


@pytest.mark.parametrize("bad", [None, "", "Bearer x", "efk_", "efk_0123456789ab_short", 42])
def test_malformed_keys_resolve_to_nothing(tmp_path, bad):
    with KeyRing(tmp_path / "keys.db") as ring:
        ring.create("acme")
        assert ring.resolve(bad) is None


def test_a_forged_secret_with_a_real_id_resolves_to_nothing(tmp_path):
    with KeyRing(tmp_path / "keys.db") as ring:
        token, _ = ring.create("acme")
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        assert ring.resolve(forged) is None


def test_only_a_hash_is_kept(tmp_path):
    with KeyRing(tmp_path / "keys.db") as ring:
        token, _ = ring.create("acme")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("keys.db*"))
    secret = token.split("_", 2)[2]  # the secret itself may hold "_"
    assert token.encode() not in raw and secret.encode() not in raw


@pytest.mark.parametrize("tenant", ["", "   ", None])
def test_a_key_needs_a_tenant(tmp_path, tenant):
    with KeyRing(tmp_path / "keys.db") as ring, pytest.raises(InvalidInput):
        ring.create(tenant)  # type: ignore[arg-type]


def test_cli_keys_beside_a_running_server_and_revocation_at_once(served):
    runner = CliRunner()
    store = served.store.path
    out = runner.invoke(cli, ["keys", "create", "--store", store, "--tenant", "acme", "--label", "cli", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    token = doc["key"]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.post(served.url + "/v1/receipts", json={}, headers=headers).status_code == 200
    listed = json.loads(runner.invoke(cli, ["keys", "list", "--store", store, "--json"]).output)["keys"]
    assert [k["id"] for k in listed] == [doc["id"]] and token not in json.dumps(listed)
    out = runner.invoke(cli, ["keys", "revoke", doc["id"], "--store", store, "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == {"revoked": doc["id"]}
    assert httpx.post(served.url + "/v1/receipts", json={}, headers=headers).status_code == 401
    out = runner.invoke(cli, ["keys", "create", "--store", store, "--json"])
    assert out.exit_code != 0 and json.loads(out.output)["error"]["type"] == "UsageError"


def test_keys_list_and_revoke_make_no_ring_for_a_store_that_has_none(tmp_path):
    """`efface keys list --store DIR` (and `revoke`) with a mistyped DIR made DIR.keys.db and
    every missing parent directory; they now change nothing: an empty list, a NotFound."""
    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_URL": None, "EFFACE_ORIGIN": None})
    typo = tmp_path / "no" / "such" / "store"
    out = runner.invoke(cli, ["keys", "list", "--store", str(typo), "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == {"keys": []}
    out = runner.invoke(cli, ["keys", "revoke", "0123456789ab", "--store", str(typo), "--json"])
    assert out.exit_code == 1 and json.loads(out.output)["error"]["type"] == "NotFound"
    assert os.listdir(tmp_path) == []
    out = runner.invoke(cli, ["keys", "create", "--store", str(typo), "--tenant", "acme", "--json"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["keys", "list", "--store", str(typo), "--json"])
    assert [k["tenant"] for k in json.loads(out.output)["keys"]] == ["acme"]


def test_a_damaged_ring_is_a_typed_error(tmp_path):
    path = tmp_path / "keys.db"
    path.write_bytes(b"this is not a database" * 100)
    from efface.service.keys import KeyRingDamaged

    with pytest.raises(KeyRingDamaged):
        KeyRing(path)
    assert key_path(tmp_path / "store") == str(tmp_path / "store.keys.db")  # beside the store, not in it


def _keys_create_at_once(store: str, count: int) -> list:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-m", "efface", "keys", "create", "--store", store, "--json"]
    procs = [
        subprocess.Popen([*args, "--tenant", f"t{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for i in range(count)
    ]
    return [(p.wait(timeout=120), *p.communicate()) for p in procs]


@pytest.mark.parametrize("existing", [False, True], ids=["new ring", "existing ring"])
def test_concurrent_keys_create_all_succeed(tmp_path, existing):
    """#33: several `efface keys create` at once. A busy ring is waited for, never reported as
    damaged, and no raw SQLite error reaches the user."""
    store = str(tmp_path / "store")
    if existing:
        with KeyRing(key_path(store)) as ring:
            ring.create("seed")
    done = _keys_create_at_once(store, 6)
    for code, out, err in done:
        assert code == 0 and not err, (out, err)
        assert json.loads(out)["key"].startswith("efk_")
    with KeyRing(key_path(store)) as ring:
        assert len(ring.list()) == 6 + existing
