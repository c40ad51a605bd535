"""Bad input: every malformed argument is refused with a typed efface error whose message
does not repeat the value (it may be personal data), and a refused call changes nothing.
Input that merely *looks* like SQL or FTS5 syntax is ordinary data: stored and found
literally."""

from __future__ import annotations

import datetime as dt
import math
import re

import pytest

import efface
from efface.validate import MAX_KEY_BYTES, MAX_METADATA_BYTES, MAX_TEXT_BYTES

from conftest import behind

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

WHO = dict(tenant="acme", subject="alice")
SEED = {
    "seed:1": ("Alice prefers green tea", "support"),
    "seed:2": ("Bob's parcel was delayed in Lyon", "support"),
    "seed:3": ("quarterly churn analysis", "analytics"),
}


@pytest.fixture
def seeded(store):
    for key, (text, purpose) in SEED.items():
        store.write(key, text, purpose=purpose, **WHO)
    store.retain("seed:1", tenant="acme", subject="alice", purpose="audit", basis="legal_hold")
    return store


def snapshot(store) -> dict:
    """Everything a failed call must leave as it was."""
    stats = store.stats()
    return {
        "records": stats["records"],
        "epoch": stats["epoch"],
        "reads": {
            k: (m.text, tuple(m.claims)) if (m := store.read(k, tenant="acme", purpose=p)) else None
            for k, (_, p) in SEED.items()
        },
        "purposes": sorted(behind(store)._origin.purposes("acme")),
        "ledger": len(store.ledger()),
        "receipts": len(store.receipts()),
        "recall": [(h.key, h.text) for h in store.recall("green tea parcel", tenant="acme", purpose="support", k=50)],
    }


def assert_clean_message(exc: BaseException, offending) -> None:
    """The message says what is wrong, never what the value was."""
    msg = str(exc)
    assert msg.strip(), "an error must say what happened"
    values = offending if isinstance(offending, tuple) else (offending,)
    for value in values:
        if isinstance(value, (bytes, bytearray)):
            assert repr(bytes(value)) not in msg
            value = bytes(value).decode("utf-8", "replace")
        if not isinstance(value, str) or len(value.strip()) < 3:
            continue  # too short to tell apart from ordinary words in the message
        assert value not in msg, msg
        assert repr(value) not in msg, msg
        if len(value) > 40:  # nor a leading slice of a long value
            assert value[:24] not in msg, msg


def check_refused(store, call, error, offending):
    before = snapshot(store)
    with pytest.raises(error) as info:
        call(store)
    assert isinstance(info.value, efface.EffaceError)
    assert_clean_message(info.value, offending)
    assert snapshot(store) == before


def _w(key="new:1", text="a new memory", **kw):
    args = dict(tenant="acme", subject="alice", purpose="support")
    args.update(kw)
    return lambda s: s.write(key, text, **args)


HUGE_KEY = "Ωmega-key-" * (MAX_KEY_BYTES // 10)
HUGE_TEXT = "confidential-paragraph " * (MAX_TEXT_BYTES // 23 + 1)
LONE = "name\udcffwith a lone surrogate"

BAD_WRITES = {
    # keys
    "empty key": (_w(key=""), efface.InvalidInput, ""),
    "huge key": (_w(key=HUGE_KEY), efface.InvalidInput, HUGE_KEY),
    "key at limit + 1": (_w(key="k" * (MAX_KEY_BYTES + 1)), efface.InvalidInput, "k" * (MAX_KEY_BYTES + 1)),
    "bytes key": (_w(key=b"bytes-key-123"), efface.InvalidInput, b"bytes-key-123"),
    "int key": (_w(key=12345), efface.InvalidInput, "12345"),
    "None key": (_w(key=None), efface.InvalidInput, None),
    "lone surrogate key": (_w(key=LONE), efface.InvalidInput, LONE),
    "NUL in key": (_w(key="nul\x00key-abc"), efface.InvalidInput, "nul\x00key-abc"),
    # texts
    "empty text": (_w(text=""), efface.InvalidInput, ""),
    "blank text": (_w(text=" \t\n\u3000 "), efface.InvalidInput, None),
    "huge text": (_w(text=HUGE_TEXT), efface.InvalidInput, HUGE_TEXT),
    "bytes text": (_w(text=b"my secret diary"), efface.InvalidInput, b"my secret diary"),
    "None text": (_w(text=None), efface.InvalidInput, None),
    "lone surrogate text": (_w(text="diary \ud800 entry"), efface.InvalidInput, "diary \ud800 entry"),
    "NUL in text": (_w(text="diary\x00entry of mine"), efface.InvalidInput, "diary\x00entry of mine"),
    # tenant / subject
    "empty tenant": (_w(tenant=""), efface.InvalidInput, ""),
    "blank subject": (_w(subject="   "), efface.InvalidInput, None),
    "bytes subject": (_w(subject=b"alice@example.com"), efface.InvalidInput, b"alice@example.com"),
    "huge subject": (_w(subject="alice.liddell@" * 30), efface.InvalidInput, "alice.liddell@" * 30),
    "lone surrogate subject": (_w(subject="Zo\udce9 Martin"), efface.InvalidInput, "Zo\udce9 Martin"),
    "list subject": (_w(subject=["alice"]), efface.InvalidInput, None),
    # purposes (a write registers a new well-formed purpose, so only the form is checked)
    "purpose with space": (_w(purpose="customer support"), efface.InvalidInput, "customer support"),
    "purpose starting with digit": (_w(purpose="9lives"), efface.InvalidInput, "9lives"),
    "purpose too long": (_w(purpose="p" * 65), efface.InvalidInput, "p" * 65),
    "purpose with SQL": (_w(purpose="x';DROP TABLE purposes;--"), efface.InvalidInput, "x';DROP TABLE purposes;--"),
    "empty purpose": (_w(purpose=""), efface.InvalidInput, ""),
    "bytes purpose": (_w(purpose=b"support"), efface.InvalidInput, None),
    # bases
    "unknown basis": (_w(basis="consnet"), efface.UnknownBasis, "consnet"),
    "empty basis": (_w(basis=""), efface.UnknownBasis, ""),
    "None basis": (_w(basis=None), efface.UnknownBasis, None),
    "case-changed basis": (_w(basis="Consent"), efface.UnknownBasis, "Consent"),
    "list basis": (_w(basis=["consent"]), efface.InvalidInput, None),
    # ttl
    "ttl 0": (_w(ttl=0), efface.InvalidInput, None),
    "ttl negative": (_w(ttl=-5), efface.InvalidInput, None),
    "ttl NaN": (_w(ttl=float("nan")), efface.InvalidInput, None),
    "ttl inf": (_w(ttl=math.inf), efface.InvalidInput, None),
    "ttl -inf": (_w(ttl=-math.inf), efface.InvalidInput, None),
    "ttl True": (_w(ttl=True), efface.InvalidInput, None),
    "ttl str": (_w(ttl="3600"), efface.InvalidInput, None),
    "ttl zero timedelta": (_w(ttl=dt.timedelta(0)), efface.InvalidInput, None),
    "ttl negative timedelta": (_w(ttl=dt.timedelta(days=-1)), efface.InvalidInput, None),
    "ttl list": (_w(ttl=[60]), efface.InvalidInput, None),
    # metadata
    "metadata with a set": (_w(metadata={"tags": {"a", "b"}}), efface.InvalidInput, None),
    "metadata with an object": (_w(metadata={"obj": object()}), efface.InvalidInput, None),
    "metadata with NaN": (_w(metadata={"score": float("nan")}), efface.InvalidInput, None),
    "metadata with bytes": (_w(metadata={"raw": b"secret-bytes"}), efface.InvalidInput, b"secret-bytes"),
    "metadata mixed key types": (_w(metadata={1: "a", "b": 2}), efface.InvalidInput, None),
    "metadata not a dict": (_w(metadata=["a", "b"]), efface.InvalidInput, None),
    "metadata lone surrogate": (_w(metadata={"n": "Zo\udce9-meta"}), efface.InvalidInput, "Zo\udce9-meta"),
    "metadata too large": (_w(metadata={"blob": "m" * MAX_METADATA_BYTES}), efface.InvalidInput, None),
    # sources
    "sources as one string": (_w(sources="seed:1"), efface.InvalidInput, None),
    "sources with bytes": (_w(sources=[b"seed:1"]), efface.InvalidInput, None),
    "sources with empty key": (_w(sources=[""]), efface.InvalidInput, None),
    "sources not iterable": (_w(sources=42), efface.InvalidInput, None),
}


@pytest.mark.parametrize("case", list(BAD_WRITES), ids=list(BAD_WRITES))
def test_bad_write_is_refused_and_changes_nothing(seeded, case):
    call, error, offending = BAD_WRITES[case]
    check_refused(seeded, call, error, offending)


BAD_CALLS = {
    # purposes never written in this tenant: a typo must not pass for an answer or an erasure
    "read unknown purpose": (
        lambda s: s.read("seed:1", tenant="acme", purpose="marketing"),
        efface.UnknownPurpose,
        "marketing",
    ),
    "recall unknown purpose": (
        lambda s: s.recall("tea", tenant="acme", purpose="marketing"),
        efface.UnknownPurpose,
        "marketing",
    ),
    "forget unknown purpose": (
        lambda s: s.forget(tenant="acme", subject="alice", purpose="marketing"),
        efface.UnknownPurpose,
        "marketing",
    ),
    "forget purpose of another tenant": (
        lambda s: s.forget(tenant="globex", purpose="support"),
        efface.UnknownPurpose,
        None,
    ),
    "read malformed purpose": (
        lambda s: s.read("seed:1", tenant="acme", purpose="sup port"),
        efface.InvalidInput,
        "sup port",
    ),
    "recall malformed purpose": (
        lambda s: s.recall("tea", tenant="acme", purpose="-support"),
        efface.InvalidInput,
        "-support",
    ),
    "forget malformed purpose": (
        lambda s: s.forget(tenant="acme", purpose="support!"),
        efface.InvalidInput,
        "support!",
    ),
    # retain
    "retain unknown basis": (
        lambda s: s.retain("seed:1", tenant="acme", subject="bob", purpose="support", basis="whim"),
        efface.UnknownBasis,
        "whim",
    ),
    "retain bad ttl": (
        lambda s: s.retain("seed:1", tenant="acme", subject="bob", purpose="support", basis="consent", ttl=-1),
        efface.InvalidInput,
        None,
    ),
    "retain missing key": (
        lambda s: s.retain("no-such-key-xyz", tenant="acme", subject="bob", purpose="support", basis="consent"),
        efface.NotFound,
        "no-such-key-xyz",
    ),
    # recall
    "recall k=0": (lambda s: s.recall("tea", tenant="acme", purpose="support", k=0), efface.InvalidInput, None),
    "recall k=-1": (lambda s: s.recall("tea", tenant="acme", purpose="support", k=-1), efface.InvalidInput, None),
    "recall k=1001": (lambda s: s.recall("tea", tenant="acme", purpose="support", k=1001), efface.InvalidInput, None),
    "recall k=True": (lambda s: s.recall("tea", tenant="acme", purpose="support", k=True), efface.InvalidInput, None),
    "recall k=2.5": (lambda s: s.recall("tea", tenant="acme", purpose="support", k=2.5), efface.InvalidInput, None),
    "recall k='10'": (lambda s: s.recall("tea", tenant="acme", purpose="support", k="10"), efface.InvalidInput, None),
    "recall empty query": (lambda s: s.recall("", tenant="acme", purpose="support"), efface.InvalidInput, None),
    "recall blank query": (lambda s: s.recall(" \n ", tenant="acme", purpose="support"), efface.InvalidInput, None),
    "recall bytes query": (
        lambda s: s.recall(b"green tea query", tenant="acme", purpose="support"),
        efface.InvalidInput,
        b"green tea query",
    ),
    "recall lone surrogate query": (
        lambda s: s.recall("tea \udcff cup", tenant="acme", purpose="support"),
        efface.InvalidInput,
        "tea \udcff cup",
    ),
    "recall huge query": (
        lambda s: s.recall(HUGE_TEXT, tenant="acme", purpose="support"),
        efface.InvalidInput,
        HUGE_TEXT,
    ),
    "recall bad subject": (
        lambda s: s.recall("tea", tenant="acme", purpose="support", subject=""),
        efface.InvalidInput,
        None,
    ),
    # read
    "read bytes key": (lambda s: s.read(b"seed:1", tenant="acme", purpose="support"), efface.InvalidInput, None),
    "read huge key": (lambda s: s.read(HUGE_KEY, tenant="acme", purpose="support"), efface.InvalidInput, HUGE_KEY),
    "read empty tenant": (lambda s: s.read("seed:1", tenant="", purpose="support"), efface.InvalidInput, None),
    # forget
    "forget nothing named": (lambda s: s.forget(tenant="acme"), efface.ScopeError, None),
    "forget empty prefix": (lambda s: s.forget(tenant="acme", prefix=""), efface.InvalidInput, None),
    "forget bytes subject": (
        lambda s: s.forget(tenant="acme", subject=b"alice-bytes"),
        efface.InvalidInput,
        b"alice-bytes",
    ),
    "forget lone surrogate key": (
        lambda s: s.forget(tenant="acme", key="seed\udcff1"),
        efface.InvalidInput,
        "seed\udcff1",
    ),
    "forget huge prefix": (lambda s: s.forget(tenant="acme", prefix=HUGE_KEY), efface.InvalidInput, HUGE_KEY),
    "forget bytes tenant": (lambda s: s.forget(tenant=b"acme", subject="alice"), efface.InvalidInput, None),
    # register_subject
    "identifiers as one string": (
        lambda s: s.register_subject("alice", tenant="acme", identifiers="alice@example.com"),
        efface.InvalidInput,
        "alice@example.com",
    ),
    "identifiers with bytes": (
        lambda s: s.register_subject("alice", tenant="acme", identifiers=[b"alice@example.com"]),
        efface.InvalidInput,
        b"alice@example.com",
    ),
    "identifiers None": (
        lambda s: s.register_subject("alice", tenant="acme", identifiers=None),
        efface.InvalidInput,
        None,
    ),
    # write_many
    "write_many empty": (
        lambda s: s.write_many([], tenant="acme", subject="alice", purpose="support"),
        efface.InvalidInput,
        None,
    ),
    "write_many not iterable": (
        lambda s: s.write_many(7, tenant="acme", subject="alice", purpose="support"),
        efface.InvalidInput,
        None,
    ),
    "write_many item not a mapping": (
        lambda s: s.write_many(["new:1"], tenant="acme", subject="alice", purpose="support"),
        efface.InvalidInput,
        None,
    ),
    "write_many duplicate key": (
        lambda s: s.write_many(
            [{"key": "dup-key-1", "text": "a"}, {"key": "dup-key-1", "text": "b"}],
            tenant="acme",
            subject="alice",
            purpose="support",
        ),
        efface.InvalidInput,
        "dup-key-1",
    ),
    "write_many missing claim": (
        lambda s: s.write_many([{"key": "new:1", "text": "a"}], tenant="acme", subject="alice"),
        efface.InvalidInput,
        None,
    ),
    "write_many bad item after good ones": (
        lambda s: s.write_many(
            [{"key": "new:1", "text": "fine"}, {"key": "new:2", "text": "ok", "ttl": 0}],
            tenant="acme",
            subject="alice",
            purpose="support",
        ),
        efface.InvalidInput,
        None,
    ),
    "write_many wrong embeddings shape": (
        lambda s: s.write_many(
            [{"key": "new:1", "text": "fine"}],
            tenant="acme",
            subject="alice",
            purpose="support",
            embeddings=[[0.1, 0.2]],
        ),
        efface.InvalidInput,
        None,
    ),
    # status
    "status empty handle": (lambda s: s.status(""), efface.InvalidInput, None),
    "status non-str handle": (lambda s: s.status(123), efface.InvalidInput, None),
    "status unknown handle": (
        lambda s: s.status("efr_0123456789abcdef01234567"),
        efface.NotFound,
        "efr_0123456789abcdef01234567",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS), ids=list(BAD_CALLS))
def test_bad_call_is_refused_and_changes_nothing(seeded, case):
    call, error, offending = BAD_CALLS[case]
    check_refused(seeded, call, error, offending)


def test_unknown_purpose_is_a_typo_guard_not_a_silent_none(seeded):
    # A well-formed purpose the tenant has used reads None when the record lacks it ...
    assert seeded.read("seed:3", tenant="acme", purpose="support") is None
    # ... and the same purpose in a tenant that never used it is refused.
    with pytest.raises(efface.UnknownPurpose):
        seeded.read("seed:1", tenant="globex", purpose="support")
    assert issubclass(efface.UnknownPurpose, efface.InvalidInput)
    assert issubclass(efface.InvalidInput, ValueError)


# -- ttl forms that are valid ----------------------------------------------------------------
@pytest.mark.parametrize(
    "ttl, seconds",
    [
        (dt.timedelta(minutes=5), 300.0),
        (1, 1.0),
        (0.5, 0.5),
        (30 * 86_400, 30 * 86_400.0),
    ],
)
def test_valid_ttl_forms(store, clock, ttl, seconds):
    store.write("t", "ttl note", ttl=ttl, purpose="support", **WHO)
    (claim,) = store.read("t", tenant="acme", purpose="support").claims
    assert claim.expires_at == pytest.approx(clock() + seconds)
    clock.advance(seconds)
    assert store.read("t", tenant="acme", purpose="support") is None


def test_limits_are_inclusive(store):
    key = "k" * MAX_KEY_BYTES
    text = "t" * (MAX_TEXT_BYTES - 2) + " x"
    store.write(key, text, purpose="support", **WHO)
    assert store.read(key, tenant="acme", purpose="support").text == text
    store.recall("x", tenant="acme", purpose="support", k=1000)
    store.recall("x", tenant="acme", purpose="support", k=1)


def test_unicode_is_fine(store):
    key, text = "clé:Zoë:📎", "Zoë préfère le thé vert 🍵, 東京で"
    store.write(key, text, tenant="Ångström AB", subject="Zoë", purpose="support")
    assert store.read(key, tenant="Ångström AB", purpose="support").text == text
    assert key in [
        h.key for h in store.recall("the vert zoe", tenant="Ångström AB", purpose="support") if "fts" in h.via
    ]
    r = store.forget(tenant="Ångström AB", prefix="clé:Zo")
    assert r.erased == (key,)


# -- SQL- and FTS-looking input is plain data ---------------------------------------------------
LOOKALIKES = [
    "'; DROP TABLE records; --",
    '"unbalanced',
    "NEAR(a b)",
    "col:term",
    "*",
    "AND OR NOT",
    "text: secret",
    "x' OR '1'='1",
    "a OR b",
    "^caret start",
    "-minus +plus",
    "{text key}: braces",
    "%_wild%card_",
    "back\\slash",
    "fts MATCH 'y'",
    '"a" NEAR/2 "b"',
    "()",
    "rowid=1; DELETE FROM claims",
]


def test_sql_and_fts_lookalikes_are_stored_and_found_literally(store):
    for i, s in enumerate(LOOKALIKES):
        # as a key, as a text, and as a tenant / subject
        store.write(s, s, tenant="acme", subject=s, purpose="support")
        store.write(f"text:{i}", f"{s} lookalike{i}", tenant="acme", subject="alice", purpose="support")
    store.write("k", "plain", tenant=LOOKALIKES[0], subject=LOOKALIKES[7], purpose="support")

    for i, s in enumerate(LOOKALIKES):
        assert store.read(s, tenant="acme", purpose="support").text == s
        assert store.read(f"text:{i}", tenant="acme", purpose="support").text == f"{s} lookalike{i}"
        hits = store.recall(s, tenant="acme", purpose="support", k=1000)  # no syntax error
        assert {h.text for h in hits} <= {s for s in LOOKALIKES} | {
            f"{s} lookalike{j}" for j, s in enumerate(LOOKALIKES)
        }
        if re.search(r"\w", s):  # it has words: the full-text path finds it by them
            assert s in [h.key for h in hits if "fts" in h.via], s
        assert f"text:{i}" in [
            h.key for h in store.recall(f"lookalike{i}", tenant="acme", purpose="support") if "fts" in h.via
        ]
        assert [h.key for h in store.recall(s, tenant="acme", purpose="support", subject=s, k=1000)] == [s]
    assert store.read("k", tenant=LOOKALIKES[0], purpose="support").text == "plain"
    assert store.stats()["records"] == 2 * len(LOOKALIKES) + 1

    # Forgetting by lookalike selectors takes exactly what they name.
    r = store.forget(tenant="acme", key="'; DROP TABLE records; --")
    assert r.erased == ("'; DROP TABLE records; --",)
    r = store.forget(tenant="acme", prefix="%_")
    assert r.erased == ("%_wild%card_",)
    r = store.forget(tenant="acme", subject="x' OR '1'='1")
    assert r.erased == ("x' OR '1'='1",)
    assert store.stats()["records"] == 2 * len(LOOKALIKES) + 1 - 3
    assert store.read("k", tenant=LOOKALIKES[0], purpose="support").text == "plain"


# -- opening -------------------------------------------------------------------------------------
def test_open_refuses_bad_targets(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    with pytest.raises(efface.InvalidInput):
        efface.open(a_file, embedder="hashing", background=False)
    for inside in (a_file / "s", a_file / "deeper" / "s"):  # was StoreDamaged: nothing is damaged
        with pytest.raises(efface.InvalidInput, match="a part of the store path is a file"):
            efface.open(inside, embedder="hashing", background=False)
    with pytest.raises(efface.OriginUnreachable) as unreachable:
        efface.open("postgresql://user:secret-pw@db.invalid/efface", embedder="hashing")
    assert "secret-pw" not in str(unreachable.value)
    with pytest.raises(efface.InvalidInput) as info:
        efface.open(tmp_path / "s", embedder="word2vec-xyz", background=False)
    assert "word2vec-xyz" not in str(info.value)
    # The refused open left the lock free.
    efface.open(tmp_path / "s", embedder="hashing", background=False).close()
