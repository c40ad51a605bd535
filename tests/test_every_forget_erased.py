"""Every acknowledged forget reaches ``erased``, on stores built the way users build them
(issue #33): single writes and ``write_many``, fresh and reopened, the background compactor
(the default) and a driven one, small and larger stores, with a waiter or without one, and
several erasures in flight. ``wait(handle, timeout)`` returns by its timeout, and ``verify``
then says ``erased``.

Why the suite had not caught the regression of issue #33: its stores ran without the
background compactor (``background=False``, the test default) or with a 50 ms interval,
and the state machine drove compaction itself, so no erasure was ever acknowledged while a
background saving round was between its absorption and its erasure; the erasure acknowledged
there was marked done by that round, and nothing erased it again. These tests run the
compactor as ``efface.open`` runs it.
"""

from __future__ import annotations

import threading
import time

import pytest

import efface

SUBJECTS = ("u0", "u1", "u2")
SLACK_S = 5.0
"""How far past its timeout a ``wait`` may return (one compactor round on a loaded machine)."""


def _fill(store: efface.Store, n: int, how: str, tenant: str = "acme") -> None:
    if how == "single":
        for i in range(n):
            store.write(
                f"k{i}",
                f"memory number {i} about tea zq{i:05d}xv",
                tenant=tenant,
                subject=SUBJECTS[i % 3],
                purpose="support",
            )
        return
    for start in range(0, n, 100):
        for subject in SUBJECTS:
            batch = [
                {"key": f"k{i}", "text": f"memory number {i} about tea zq{i:05d}xv"}
                for i in range(start, min(start + 100, n))
                if SUBJECTS[i % 3] == subject
            ]
            if batch:
                store.write_many(batch, tenant=tenant, subject=subject, purpose="support")


def _erased(store: efface.Store, handle: str, timeout: float = 30.0) -> None:
    began = time.monotonic()
    st = store.wait(handle, timeout)
    took = time.monotonic() - began
    assert took < timeout + SLACK_S, f"wait({timeout}) returned after {took:.1f} s"
    assert st.erased, f"not erased after wait({timeout}): {st.paths}, alarms {st.alarms}"
    assert not st.alarms, st.alarms
    v = store.verify(handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]


@pytest.mark.parametrize("how", ["single", "batch"])
@pytest.mark.parametrize("size", [300, 3000])
@pytest.mark.parametrize("background", [True, False])
def test_a_forget_on_a_fresh_store_reaches_erased(tmp_path, how, size, background):
    with efface.open(str(tmp_path / "s"), embedder="hashing", background=background) as store:
        _fill(store, size, how)
        receipt = store.forget(tenant="acme", subject="u0")
        assert len(receipt.erased) == size // 3
        _erased(store, receipt.handle)
        assert store.read("k0", tenant="acme", purpose="support") is None
        assert store.read("k1", tenant="acme", purpose="support") is not None


@pytest.mark.parametrize("background", [True, False])
def test_a_forget_on_a_reopened_store_reaches_erased(tmp_path, background):
    path = str(tmp_path / "s")
    with efface.open(path, embedder="hashing", background=background) as store:
        _fill(store, 600, "single")
        first = store.forget(tenant="acme", key="k3")  # an erasure nobody waited on before the close
    with efface.open(path, embedder="hashing", background=background) as store:
        _erased(store, first.handle)
        _fill(store, 90, "batch", tenant="other")
        receipt = store.forget(tenant="acme", subject="u1")
        _erased(store, receipt.handle)


def test_several_erasures_in_flight_all_reach_erased(tmp_path):
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        _fill(store, 900, "single")
        receipts = [store.forget(tenant="acme", subject=s) for s in SUBJECTS]
        receipts += [store.forget(tenant="acme", key="k1")]  # nothing left to erase: still erased
        for r in reversed(receipts):
            _erased(store, r.handle)


def test_erasures_nobody_waits_on_are_erased_within_their_bound(tmp_path):
    """Without a waiter the compactor batches erasures; each still reaches ``erased`` on its
    own, well within the declared bound, seen by polling ``status``."""
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        _fill(store, 300, "single")
        handles = [store.forget(tenant="acme", key=f"k{i}").handle for i in range(0, 30, 3)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(store.status(h).erased for h in handles):
            time.sleep(0.05)
        assert all(store.status(h).erased for h in handles), [store.status(h).paths for h in handles]
        assert all(store.verify(h).level == "erased" for h in handles)


def test_forgets_beside_writers_and_waiters_all_reach_erased(tmp_path):
    """Writes stream in from other threads while forgets are acknowledged and waited on:
    the compactor's rounds run between every pair of them."""
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        _fill(store, 300, "single")
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            i = 0
            try:
                while not stop.is_set() and i < 2000:
                    store.write(f"w{n}-{i}", f"streamed note {i}", tenant="acme", subject="w", purpose="support")
                    i += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(0, 60, 4):
                receipt = store.forget(tenant="acme", key=f"k{i}")
                _erased(store, receipt.handle)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors


def test_an_erasure_acknowledged_during_a_saving_round_is_erased(tmp_path):
    """The regression itself, made certain: a forget commits after a background round has
    absorbed the change log and before it erases. That round cannot erase it; a later one
    must (the round once marked it done, and ``wait`` then waited in vain)."""
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        _fill(store, 90, "single")
        comp = store._compactor
        absorb = comp.absorb
        acked: list[efface.Receipt] = []

        def absorb_then_forget(upto=None):
            absorb(upto)
            if not acked and threading.current_thread().name == "efface-compactor":
                acked.append(store.forget(tenant="acme", subject="u2"))

        comp.absorb = absorb_then_forget
        comp.wake(erased=True, urgent=True)  # a saving round, now
        deadline = time.monotonic() + 10
        while not acked and time.monotonic() < deadline:
            time.sleep(0.01)
        comp.absorb = absorb
        assert acked, "the compactor ran no round"
        _erased(store, acked[0].handle)


def test_wait_returns_by_its_timeout_when_the_bytes_cannot_go(tmp_path, monkeypatch):
    """An erasure whose bytes cannot leave a file (here: every in-place erasure of the ANN
    file fails) is not reported erased, and ``wait`` still returns by its timeout."""
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        _fill(store, 90, "single")
        store.compact()  # the ANN file exists: its erasure goes in place

        def broken() -> None:
            raise OSError("the disk refuses")

        monkeypatch.setattr(store._ann, "erase", broken)
        receipt = store.forget(tenant="acme", subject="u1")
        began = time.monotonic()
        st = store.wait(receipt.handle, 2)
        assert time.monotonic() - began < 2 + SLACK_S
        assert not st.erased
        assert store.verify(receipt.handle).level == "unreadable"
        monkeypatch.undo()  # the disk is back: the next rounds erase it
        _erased(store, receipt.handle)
