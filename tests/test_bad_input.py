"""Hostile input through the public API, on every backend: each bad value gets a typed efface
error that says what to do, never a raw Python error or a hang, and the store's content is
intact afterwards (nothing written, nothing lost).

The faults of the store's files (damaged pages, a full disk, ...) are in tests/sqlite/test_faults.py.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest

import efface
from efface.errors import EffaceError, InvalidInput

HTTP_CONTRACT = True
"""These tests also run against a served store (the ``http`` backend): see conftest.py."""

SEED = {f"s{i}": f"seed memory {i}: Bob likes espresso" for i in range(5)}


@pytest.fixture
def seeded(store):
    for key, text in SEED.items():
        store.write(key, text, tenant="acme", subject="bob", purpose="support", metadata={"n": 1})
    return store


def assert_intact(store) -> None:
    """The seeded records are there, whole, and nothing else was added or erased."""
    for key, text in SEED.items():
        m = store.read(key, tenant="acme", purpose="support")
        assert m is not None and m.text == text and dict(m.metadata) == {"n": 1}
    assert store.stats()["records"] == len(SEED)
    assert store.receipts() == []
    assert store.verify_ledger().ok


def refused(call, match: str | None = None) -> InvalidInput:
    """``call()`` raises InvalidInput (also a ValueError), and nothing else."""
    with pytest.raises(InvalidInput, match=match) as info:
        call()
    return info.value


# -- purposes: the whole string must match ----------------------------------------------------------
BAD_PURPOSES = ["support\n", "support\r\n", "support\n\n", "\nsupport", "supp\nort", "support ", "support\x00"]


@pytest.mark.parametrize("purpose", BAD_PURPOSES)
def test_a_purpose_with_a_newline_or_space_is_refused_everywhere(seeded, purpose):
    s = seeded
    refused(lambda: s.write("x", "some text", tenant="acme", subject="bob", purpose=purpose), "purpose must be")
    refused(lambda: s.write_many([{"key": "x", "text": "t", "subject": "bob", "purpose": purpose}], tenant="acme"))
    refused(lambda: s.retain("s1", tenant="acme", subject="bob", purpose=purpose, basis="consent"))
    refused(lambda: s.read("s1", tenant="acme", purpose=purpose))
    refused(lambda: s.recall("espresso", tenant="acme", purpose=purpose))
    refused(lambda: s.forget(tenant="acme", purpose=purpose))
    assert_intact(s)
    # no new purpose got in: the only known one is still "support"
    with pytest.raises(efface.UnknownPurpose, match=r"known purposes: support\)"):
        s.read("s1", tenant="acme", purpose="analytics")


# -- metadata nested very deep ------------------------------------------------------------------------
def _nested(depth: int, kind: str):
    value: object = "leaf"
    for _ in range(depth):
        value = {"a": value} if kind == "dict" else [value]
    return value if kind == "dict" else {"a": value}


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_metadata_nested_50000_deep_is_refused(seeded, kind):
    deep = _nested(50_000, kind)
    refused(lambda: seeded.write("x", "t", tenant="acme", subject="bob", purpose="support", metadata=deep), "nested")
    refused(
        lambda: seeded.write_many(
            [{"key": "x", "text": "t", "metadata": deep}], tenant="acme", subject="b", purpose="support"
        )
    )
    refused(lambda: seeded.rederive("s1", "t", tenant="acme", metadata=deep))
    assert_intact(seeded)


def test_metadata_nested_64_deep_is_kept(store):
    from efface.validate import MAX_METADATA_DEPTH

    store.write(
        "x", "t", tenant="acme", subject="bob", purpose="support", metadata=_nested(MAX_METADATA_DEPTH - 1, "dict")
    )
    assert store.read("x", tenant="acme", purpose="support").metadata["a"]["a"]
    refused(
        lambda: store.write(
            "y", "t", tenant="acme", subject="bob", purpose="support", metadata=_nested(MAX_METADATA_DEPTH + 1, "dict")
        )
    )


def test_metadata_that_holds_itself_is_refused(seeded):
    loop: dict = {}
    loop["self"] = loop
    refused(lambda: seeded.write("x", "t", tenant="acme", subject="bob", purpose="support", metadata=loop))
    assert_intact(seeded)


@pytest.mark.parametrize(
    "meta",
    [{1: "x"}, {True: "x"}, {None: "x"}, {1.5: "x"}, {"a": {2: "x"}}, {"a": [{"b": 1}, {3: "x"}]}, {1: "a", "1": "b"}],
    ids=["int", "bool", "None", "float", "nested", "in-list", "collision"],
)
def test_metadata_with_a_key_that_is_not_a_string_is_refused(seeded, meta):
    """{1: "x"} was stored as {"1": "x"} without a word (JSON's keys are strings), and
    {1: "a", "1": "b"} would have been two keys made one. On every origin and over HTTP (the
    client checks before it sends: JSON cannot even carry the difference)."""
    refused(lambda: seeded.write("x", "t", tenant="acme", subject="bob", purpose="support", metadata=meta), "strings")
    refused(
        lambda: seeded.write_many(
            [{"key": "x", "text": "t", "metadata": meta}], tenant="acme", subject="b", purpose="support"
        ),
        "strings",
    )
    refused(lambda: seeded.rederive("s1", "t", tenant="acme", metadata=meta), "strings")
    assert_intact(seeded)
    assert seeded.read("x", tenant="acme", purpose="support") is None


def test_whole_numbers_of_numpys_integer_types_are_taken(seeded):
    """recall(k=np.int64(3)) and scan(limit=...) were refused ("k must be an int"), and over
    HTTP the client could not even send them ("cannot be sent as JSON"): a count taken from
    an array is a whole number like any other. A float or a bool is still refused."""
    import numpy as np

    hits = seeded.recall("espresso", tenant="acme", purpose="support", k=np.int64(2), window=np.int32(1))
    assert len(hits) == 2
    assert len(seeded.scan(tenant="acme", purpose="support", limit=np.int64(1))) == 1
    refused(lambda: seeded.recall("tea", tenant="acme", purpose="support", k=np.float64(2)), "k must be an int")
    refused(lambda: seeded.scan(tenant="acme", purpose="support", limit=True), "limit must be an int")


@pytest.mark.parametrize("embedder", [5, object(), b"hashing"], ids=["int", "object", "bytes"])
def test_an_embedder_that_is_none_of_the_kinds_is_invalid_input(tmp_path, embedder):
    """efface.open(path, embedder=5) raised AttributeError ('int' object has no attribute
    'name') from deep in the store's assembly; the store is not left locked."""
    with pytest.raises(InvalidInput, match="embedder must be None"):
        efface.open(tmp_path / "s", embedder=embedder, background=False)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        assert store.embedder.name.startswith("hashing")


def test_scan_with_an_empty_prefix_lists_every_key(seeded):
    """prefix="" was refused ("prefix must not be empty"), where it means what None does."""
    every = [m.key for m in seeded.scan(tenant="acme", purpose="support")]
    assert [m.key for m in seeded.scan(tenant="acme", purpose="support", prefix="")] == every == sorted(SEED)


# -- ttl beyond any float ----------------------------------------------------------------------------
@pytest.mark.parametrize("ttl", [10**400, -(10**400), 10**309], ids=["1e400", "-1e400", "1e309"])
def test_a_ttl_beyond_any_float_is_refused(seeded, ttl):
    refused(lambda: seeded.write("x", "t", tenant="acme", subject="bob", purpose="support", ttl=ttl), "ttl")
    refused(
        lambda: seeded.write_many(
            [{"key": "x", "text": "t", "ttl": ttl}], tenant="acme", subject="b", purpose="support"
        )
    )
    refused(lambda: seeded.retain("s1", tenant="acme", subject="carol", purpose="support", basis="consent", ttl=ttl))
    assert_intact(seeded)


def test_the_largest_timedelta_is_a_valid_ttl(store):
    store.write("x", "t", tenant="acme", subject="bob", purpose="support", ttl=dt.timedelta.max)
    assert store.read("x", tenant="acme", purpose="support") is not None


# -- wait(timeout=...) ----------------------------------------------------------------------------
BAD_TIMEOUTS = [None, "5", b"5", float("nan"), float("inf"), -1, True, 10**400, [1]]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=lambda t: "1e400" if t == 10**400 else repr(t))
def test_wait_refuses_a_timeout_that_is_not_finite_seconds(store, timeout):
    store.write("k", "a memory to forget", tenant="acme", subject="bob", purpose="support")
    store.write("other", "a memory to keep", tenant="acme", subject="carol", purpose="support")
    receipt = store.forget(tenant="acme", subject="bob")
    refused(lambda: store.wait(receipt.handle, timeout=timeout), "timeout")
    refused(lambda: store.wait(receipt.handle, timeout, tenant="acme"), "timeout")
    # the erasure is unharmed: a good wait finishes it
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.read("other", tenant="acme", purpose="support").text == "a memory to keep"


def test_wait_with_a_zero_timeout_answers_at_once(store):
    store.write("k", "a memory to forget", tenant="acme", subject="bob", purpose="support")
    receipt = store.forget(tenant="acme", subject="bob")
    assert store.wait(receipt.handle, timeout=0).handle == receipt.handle


# -- closing from several threads --------------------------------------------------------------------
def test_close_from_several_threads_at_once(open_store, backend):
    s = open_store(background=True)
    s.write("a", "hello there", tenant="t", subject="s", purpose="p")
    errors: list[BaseException] = []
    gate = threading.Barrier(8)

    def close() -> None:
        gate.wait()
        try:
            s.close()
        except BaseException as exc:  # every one is a failure here
            errors.append(exc)

    threads = [threading.Thread(target=close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with pytest.raises(EffaceError, match="closed"):
        s.read("a", tenant="t", purpose="p")
    if backend in ("sqlite", "postgres"):  # persists across reopen
        again = open_store(s.path)
        assert again.read("a", tenant="t", purpose="p").text == "hello there"


# -- the store location ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [123, None, b"/tmp/bytes-path", "/tmp/a\x00b"], ids=["int", "None", "bytes", "NUL"])
def test_a_store_location_that_is_not_a_path_is_refused(where, backend):
    with pytest.raises(InvalidInput, match="store location"):
        efface.open(where, embedder="hashing", background=False, origin=backend)


def test_an_empty_store_location_is_refused_and_makes_no_store_in_the_working_directory(tmp_path, monkeypatch):
    """``efface.open("")`` opened (and created) a store in the current directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match="store location"):
        efface.open("", embedder="hashing", background=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["colour", "backgroud", "kek_flie"])
def test_an_unknown_open_option_is_invalid_input_naming_the_ones_taken(open_store, backend, option):
    """A misspelt option of ``efface.open`` raised a raw ``TypeError`` from ``Store.__init__``
    (on a directory and on PostgreSQL alike); it names the options each kind of store takes."""
    with pytest.raises(InvalidInput, match=f"unknown option {option!r}") as err:
        open_store(**{option: 1})
    assert "background" in str(err.value)
    again = open_store()  # nothing was left open or locked
    again.write("a", "hello there", tenant="t", subject="s", purpose="p")
    assert again.read("a", tenant="t", purpose="p").text == "hello there"


BAD_OPTIONS = {
    "background-str": {"background": "yes"},
    "interval-negative": {"compact_interval": -1},
    "interval-zero": {"compact_interval": 0},
    "interval-str": {"compact_interval": "x"},
    "bound-nan": {"erase_bound_s": float("nan")},
    "ann-bound-negative": {"ann_max_propagation_s": -5},
    "clock-str": {"clock": "x"},
}


@pytest.mark.parametrize("options", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_an_open_option_of_the_wrong_kind_is_invalid_input(open_store, options):
    """They were taken as given: compact_interval="x" killed the compactor thread with a raw
    TypeError (the store then ran without one), clock="x" failed every write with one, and
    a negative or NaN interval or bound was kept."""
    (name,) = options
    with pytest.raises(InvalidInput, match=name):
        open_store(**options)
    again = open_store()  # nothing was left open or locked
    again.write("a", "hello there", tenant="t", subject="s", purpose="p")


WRONG_CALLS = {
    "unknown-keyword": lambda s: s.write("k", "hello there", tenant="t", subject="s", purpose="p", colour="blue"),
    "missing-keyword": lambda s: s.write("k", "hello there", tenant="t", subject="s"),
    "read-with-subject": lambda s: s.read("s0", tenant="acme", purpose="support", subject="bob"),
    "recall-limit": lambda s: s.recall("espresso", tenant="acme", purpose="support", limit=3),
    "forget-typo": lambda s: s.forget(tenant="acme", sbject="bob"),
    "too-many-positional": lambda s: s.wait("efr_x", 1, 2, 3),
}


@pytest.mark.parametrize("call", WRONG_CALLS.values(), ids=WRONG_CALLS.keys())
def test_a_call_with_arguments_the_method_does_not_take_is_invalid_input(seeded, call):
    """A misspelt or missing keyword raised Python's bare TypeError, not an efface error; it
    is InvalidInput now (and still a TypeError), naming the method, never a value."""
    with pytest.raises(InvalidInput, match=r"\(\) .*argument") as err:
        call(seeded)
    assert isinstance(err.value, TypeError)
    assert "help(" in str(err.value)
    assert "hello there" not in str(err.value) and "espresso" not in str(err.value)
    assert_intact(seeded)


def test_a_lone_surrogate_in_a_handle_or_a_reason_is_invalid_input(store):
    """#33: it reached SQLite's binding and raised a raw UnicodeEncodeError."""
    store.write("k1", "a note", tenant="t", subject="s", purpose="support")
    for call in (
        lambda: store.status("\ud800", tenant="t"),
        lambda: store.wait("efr_\udcff", 0, tenant="t"),
        lambda: store.verify("\ud800"),
        lambda: store.certificate("\ud800", tenant="t"),
        lambda: store.set_policy("t", "keep", reason="because \ud800"),
        lambda: store.set_policy("t", "quarantine", reason="\ud800"),
        lambda: store.release("k1", tenant="t", reason="\ud800"),
    ):
        with pytest.raises(InvalidInput) as err:
            call()
        assert "\ud800" not in str(err.value) and "\udcff" not in str(err.value)
