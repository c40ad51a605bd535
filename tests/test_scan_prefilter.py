"""The byte scan's compiled loops (efface.compiled, efface.erasure.prefilter) against numpy.

The compiled loop must find exactly what the numpy passes find: the same windows, the same
offsets, kinds and hashes, at every alignment and across chunk seams. Where numba is missing
or refused, the scan falls back to the numpy passes and still finds every copy.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efface import compiled
from efface.erasure import bytescan, fingerprint
from efface.erasure.fingerprint import Fingerprinter, Fingerprints


@pytest.fixture(autouse=True)
def fresh_choice():
    compiled.reset()
    yield
    compiled.reset()


def _scan(fpr: Fingerprinter, fp: Fingerprints, paths: list[str], kind: str, monkeypatch) -> list[tuple]:
    monkeypatch.setenv(compiled.KERNEL_ENV, kind)
    compiled.reset()
    assert compiled.on() == (kind != "numpy")
    hits, _ = fpr.scan_arrays(paths, fp)
    return sorted(zip(hits.file.tolist(), hits.offset.tolist(), hits.width.tolist(), hits.hash.tolist(), strict=True))


items = st.lists(st.binary(min_size=8, max_size=120), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(items=items, seed=st.integers(0, 2**32 - 1), vector=st.booleans())
def test_compiled_and_numpy_scans_find_the_same_windows(tmp_path_factory, monkeypatch_session, items, seed, vector):
    """Random items planted at random offsets (some across the seam between two chunks) in
    random bytes: both scans report the same hits, and every planted copy is among them."""
    monkeypatch = monkeypatch_session
    # small chunks, so that a few kilobytes cross several seams in both modes
    monkeypatch.setattr(bytescan, "CHUNK", 4096)
    monkeypatch.setattr(bytescan, "COMPILED_CHUNK", 8192)
    rng = np.random.default_rng(seed)
    fpr = Fingerprinter(rng.bytes(32))
    fp = Fingerprints()
    fpr.add_many(fp, "text", items, uniform=True)
    if vector:
        fpr.add(fp, "embedding", rng.standard_normal(384).astype(np.float16).tobytes(), fingerprint.VECTOR_REGION)
    data = bytearray(rng.bytes(40_000))
    planted = []
    for item in items:
        at = int(rng.integers(0, len(data) - len(item)))
        data[at : at + len(item)] = item
        planted.append((at, item))
    path = tmp_path_factory.mktemp("scan") / "f.bin"
    path.write_bytes(bytes(data))
    numpy_hits = _scan(fpr, fp, [str(path)], "numpy", monkeypatch)
    compiled_hits = _scan(fpr, fp, [str(path)], "compiled", monkeypatch)
    assert compiled_hits == numpy_hits
    for at, item in planted:
        alone = Fingerprints()
        fpr.add_many(alone, "text", [item], uniform=True)
        if alone.too_short:
            continue  # an item that cannot be fingerprinted (too short, zeros) is counted, not searched for
        # a later plant may have overwritten part of this one: look only where it is intact
        if bytes(data[at : at + len(item)]) != item:
            continue
        assert any(at <= off and off + width <= at + len(item) for _f, off, width, _h in compiled_hits), (at, item)


@pytest.fixture(scope="module")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_a_missing_numba_falls_back_to_numpy_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    with caplog.at_level(logging.WARNING, logger="efface.compiled"):
        assert not compiled.on()
    assert "numba unavailable" in caplog.text
    fpr = Fingerprinter(os.urandom(32))
    fp = Fingerprints()
    text = b"Alice Smith told the nurse about Lyon"
    fpr.add(fp, "text", text)
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(5000) + text + os.urandom(5000))
    hits, scanned = fpr.scan([str(path)], fp)
    assert scanned == 10_000 + len(text) and hits and all(5000 <= h.offset < 5000 + len(text) for h in hits)


def test_small_scans_keep_numpy_until_the_loops_are_compiled(monkeypatch):
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    assert not compiled.for_scan(compiled.COMPILE_AT - 1)  # not compiled for a small store
    assert not compiled.ready()
    assert compiled.for_scan(compiled.COMPILE_AT)  # a large one compiles
    assert compiled.ready() and compiled.for_scan(100)  # and then every scan uses them


def test_a_large_store_compiles_in_the_background_when_opened(tmp_path, monkeypatch):
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    (tmp_path / "small.db").write_bytes(b"x" * 1000)
    monkeypatch.setattr(compiled, "COMPILE_AT", 10_000)
    compiled.warm(str(tmp_path))
    time.sleep(0.2)
    assert not compiled.ready()  # under the threshold: nothing compiled
    (tmp_path / "big.db").write_bytes(b"x" * 10_000)
    compiled.warm(str(tmp_path))
    deadline = time.monotonic() + 60
    while not compiled.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert compiled.ready()
    compiled.warm(str(tmp_path / "missing"))  # already chosen: nothing to do, no error


def test_a_store_that_grows_past_the_size_compiles_its_loops_for_recall(tmp_path, monkeypatch):
    """A store opened small and written to past COMPILE_AT starts the compile after the
    write that took it there (once), so its recalls get the compiled loops without a
    reopen; its recalls meanwhile answer the same as they do after."""
    import efface

    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    started: list[str] = []
    real_thread = compiled.threading.Thread

    def counting(*a, **kw):
        started.append(kw.get("name", ""))
        return real_thread(*a, **kw)

    monkeypatch.setattr(compiled.threading, "Thread", counting)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        size = sum(f.stat().st_size for f in (tmp_path / "s").iterdir() if f.is_file())
        monkeypatch.setattr(compiled, "COMPILE_AT", size + 200_000)
        store.write_many([{"key": "k0", "text": "tea in the morning"}], tenant="acme", subject="ann", purpose="support")
        assert not compiled.ready() and started == []  # still under the size
        before = store.recall("morning tea", tenant="acme", purpose="support", k=5)
        for b in range(6):
            store.write_many(
                [{"key": f"k{b}-{i}", "text": f"note {i} of batch {b} " + "filler words " * 20} for i in range(200)],
                tenant="acme",
                subject="ann",
                purpose="support",
            )
        deadline = time.monotonic() + 60
        while not compiled.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert compiled.ready() and started.count("efface-compile") == 1
        after = store.recall("morning tea", tenant="acme", purpose="support", k=5)
        assert [h.key for h in after][:1] == [h.key for h in before][:1] == ["k0"]


def test_warm_on_a_missing_directory_does_nothing(tmp_path):
    compiled.warm(str(tmp_path / "missing"))
    assert not compiled.ready()


def test_a_loop_numba_cannot_compile_leaves_every_loop_in_numpy(monkeypatch, caplog):
    """A numba that imports but fails on one loop: no loop is half compiled, a warning says
    so, and the scans run their numpy versions."""
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)

    def refuse(f):
        raise RuntimeError("no")

    bad = compiled.Loop(lambda x: x, refuse)
    monkeypatch.setattr(compiled, "_loops", [*compiled._loops, bad])
    with caplog.at_level(logging.WARNING, logger="efface.compiled"):
        assert not compiled.on()
    assert "could not compile" in caplog.text
    assert all(one.compiled is None for one in compiled._loops)
    assert not compiled.for_scan(compiled.COMPILE_AT)  # chosen: numpy, whatever the size


def test_a_loop_registered_after_the_choice_is_compiled_too(monkeypatch):
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    assert compiled.on()
    monkeypatch.setattr(compiled, "_loops", list(compiled._loops))
    seen = []

    @compiled.loop(lambda f: seen.append(f(np.arange(3, dtype=np.int64))))
    def total(a):  # pragma: no cover - run compiled
        s = 0
        for x in a:
            s += x
        return s

    assert total.compiled is not None and seen == [3]


def test_a_late_loop_that_fails_to_compile_turns_every_loop_off(monkeypatch):
    monkeypatch.delenv(compiled.KERNEL_ENV, raising=False)
    assert compiled.on()
    monkeypatch.setattr(compiled, "_loops", list(compiled._loops))

    def refuse(f):
        raise RuntimeError("no")

    compiled.loop(refuse)(lambda x: x)
    assert not compiled.on() and all(one.compiled is None for one in compiled._loops)
