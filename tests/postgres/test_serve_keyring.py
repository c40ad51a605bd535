"""A PostgreSQL store's key ring (:class:`efface.service.pgkeys.PgKeyRing`) behaves exactly as
an embedded store's (:class:`efface.service.keys.KeyRing`): the same checks run on both. And
what only the database ring has: nothing in clear in the database, one store's ring only."""

from __future__ import annotations

import warnings

import pytest

import efface
from efface.errors import InvalidInput, NotFound
from efface.service.keys import KeyRing, Ring
from efface.service.pgkeys import PgKeyRing, redact


def _pg_store(pg_db, tmp_path) -> tuple[str, str]:
    kek = str(tmp_path / "efface.kek")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # KeyFileCreated
        efface.open(pg_db.url, embedder="hashing", kek_file=kek, background=False).close()
    return pg_db.url, kek


@pytest.fixture(params=["sqlite", "postgres"])
def ring(request, tmp_path):
    if request.param == "sqlite":
        r: Ring = KeyRing(tmp_path / "keys.db")
    else:
        url, kek = _pg_store(request.getfixturevalue("pg_db"), tmp_path)
        r = PgKeyRing(url, kek_file=kek)
    with r:
        yield r


def test_create_resolve_list_revoke(ring):
    token, key = ring.create("acme", label="bot")
    other, okey = ring.create("globex")
    assert token.startswith("efk_") and key.tenant == "acme" and key.label == "bot"
    assert ring.resolve(token) == "acme" and ring.resolve(other) == "globex"
    assert [k.id for k in ring.list(tenant="acme")] == [key.id]
    assert [(k.id, k.tenant, k.label) for k in ring.list()] == [(key.id, "acme", "bot"), (okey.id, "globex", None)]
    assert ring.list(tenant="nobody") == []
    assert ring.revoke(key.id) == key
    assert ring.resolve(token) is None and ring.resolve(other) == "globex"
    with pytest.raises(NotFound):
        ring.revoke(key.id)
    assert ring.revoke(other).id == okey.id  # by the whole key
    assert ring.list() == []


@pytest.mark.parametrize("bad", [None, "", "Bearer x", "efk_", "efk_0123456789ab_short", 42])
def test_malformed_keys_resolve_to_nothing(ring, bad):
    ring.create("acme")
    assert ring.resolve(bad) is None


def test_a_forged_secret_with_a_real_id_resolves_to_nothing(ring):
    token, _ = ring.create("acme")
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert ring.resolve(forged) is None


@pytest.mark.parametrize(
    ("tenant", "label"), [("", None), ("   ", None), (None, None), ("acme", "x" * 201), ("acme", 3), ("a\x00b", None)]
)
def test_bad_tenants_and_labels_are_refused(ring, tenant, label):
    with pytest.raises(InvalidInput):
        ring.create(tenant, label=label)
    assert ring.list() == []


@pytest.mark.parametrize("bad", ["", "xyz", "efk_zz", 12])
def test_revoke_needs_a_key_id(ring, bad):
    with pytest.raises(InvalidInput):
        ring.revoke(bad)


def test_pg_ring_keeps_nothing_in_clear_and_needs_the_store(pg_db, tmp_path):
    with pytest.raises(NotFound):
        PgKeyRing(pg_db.url, kek_file=tmp_path / "efface.kek")  # no store in this database yet
    assert not (tmp_path / "efface.kek").exists()
    url, kek = _pg_store(pg_db, tmp_path)
    tenant, label = "tenant-of-quillon@example.org", "held by quillon-bot"
    with PgKeyRing(url, kek_file=kek) as ring:
        token, _ = ring.create(tenant, label=label)
        with pg_db.connect() as conn:
            rows = conn.execute("SELECT * FROM efface.api_keys").fetchall()
        raw = repr(rows).encode() + b"".join(bytes(c) for r in rows for c in r if isinstance(c, (bytes, memoryview)))
        for secret in (tenant, label, token, token.split("_", 2)[2]):
            assert secret.encode() not in raw
        # a tenant forgotten in the store keeps its key working, as on an embedded store
        with efface.open(url, embedder="hashing", kek_file=kek, background=False) as store:
            store.write("n1", "a note", tenant=tenant, subject="s", purpose="p")
            store.forget(tenant=tenant, everything=True)
        assert ring.resolve(token) == tenant


def test_redact_hides_the_password():
    assert "s3cr" not in redact("postgresql://u:s3cr@h:5432/db") and "***" in redact("postgresql://u:s3cr@h/db")
    assert "s3cr" not in redact("host=h password=s3cr dbname=db")
    assert redact("postgresql://u@h/db").count("***") == 0
