"""Group commit at the chokepoint (efface.chokepoint): mutations that queue while another holds
the store's lock are committed together by the next leader, on SQLite in one transaction with
one fsync, and each caller still gets its own epoch, result or error.

Each test queues its calls deterministically: it holds the store's lock, starts one thread per
call, waits until every call is waiting at the chokepoint, and only then lets go; the first
thread to take the lock leads them all. (The wait has a deadline only so a bug cannot hang the
suite; nothing is timed.)
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import efface
from efface.chokepoint import StoreLock
from efface.errors import KeyInUse, StoreUnwritable


def queued(store, calls: list[Callable[[], Any]]) -> list[tuple[str, Any]]:
    """Run ``calls`` so they all queue at the chokepoint, in list order; each outcome is
    ``("ok", value)`` or ``("error", exception)``."""
    out: list[tuple[str, Any]] = [("none", None)] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            out[i] = ("ok", call())
        except Exception as exc:
            out[i] = ("error", exc)

    threads = []
    with store._lock:
        for i, call in enumerate(calls):
            t = threading.Thread(target=run, args=(i, call))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 60
            while len(store._chokepoint._queue) < i + 1:  # queued in this order
                assert time.monotonic() < deadline, "a call never reached the chokepoint"
                time.sleep(0.005)
    for t in threads:
        t.join()
    return out


class Groups:
    """How many group transactions the SQLite origin opened (each is one COMMIT, one fsync);
    the memory origin has no groups, and there the count is not checked."""

    def __init__(self, origin) -> None:
        self.real = getattr(origin, "group", None)
        self.opened = 0

    def counting(self, *args):
        self.opened += 1
        return self.real(*args)

    def check(self, expected: int) -> None:
        if self.real is not None:
            assert self.opened == expected


@pytest.fixture
def groups(store):
    counter = Groups(store._origin)
    if counter.real is not None:
        store._origin.group = counter.counting
    yield counter
    if counter.real is not None:
        del store._origin.group


def queued_after(store, groups: Groups, key: str, text: str, subject: str, calls: list[Callable[[], Any]]):
    """Write one record first, then queue ``calls`` (see :func:`queued`); ``groups`` counts
    only the groups the queued calls made."""
    store.write(key, text, tenant="t", subject=subject, purpose="p")
    groups.opened = 0
    return queued(store, calls)


def write(store, key: str, text: str, subject: str = "s"):
    return lambda: store.write(key, text, tenant="t", subject=subject, purpose="p")


def test_writes_that_queue_together_commit_together_each_with_its_own_epoch(store, groups):
    texts = {f"k{i}": f"memory number {i} about tea" for i in range(8)}
    out = queued_after(store, groups, "first", "the first memory", "s", [write(store, k, t) for k, t in texts.items()])
    assert [kind for kind, _ in out] == ["ok"] * 8
    epochs = [epoch for _, epoch in out]
    assert epochs == sorted(epochs) and len(set(epochs)) == 8  # one each, in arrival order
    groups.check(1)  # eight writes, one transaction: one fsync
    for key, text in texts.items():
        assert store.read(key, tenant="t", purpose="p").text == text
    assert {h.key for h in store.recall("tea", tenant="t", purpose="p", k=20)} >= set(texts)


def test_a_refused_write_in_a_group_fails_alone_and_leaves_nothing(store, groups):
    out = queued_after(
        store,
        groups,
        "held",
        "bob's own text",
        "bob",
        [
            write(store, "a", "alpha text"),
            write(store, "held", "a text that would overwrite bob's", subject="alice"),  # KeyInUse
            write(store, "b", "beta text"),
        ],
    )
    assert out[0][0] == "ok" and out[2][0] == "ok"
    assert out[1][0] == "error" and isinstance(out[1][1], KeyInUse)
    groups.check(1)
    assert store.read("a", tenant="t", purpose="p").text == "alpha text"
    assert store.read("b", tenant="t", purpose="p").text == "beta text"
    assert store.read("held", tenant="t", purpose="p").text == "bob's own text"
    assert out[2][1] == out[0][1] + 1  # the refused write's savepoint took its epoch back with it


def test_a_lone_write_that_fails_after_its_rows_are_written_leaves_nothing(store, monkeypatch):
    """A mutation alone in its group runs without a savepoint (SQLite): when its body raises
    after some of its rows are in, the whole transaction goes, and the next write takes the
    epoch it would have had."""
    first = store.write("seed", "the first memory", tenant="t", subject="s", purpose="p")
    seen = []
    real = store._derivations.on_write

    def failing(tx, tenant, rid, text):
        seen.append(rid)
        if len(seen) == 30:
            raise RuntimeError("the body failed half way")
        return real(tx, tenant, rid, text)

    monkeypatch.setattr(store._derivations, "on_write", failing)
    items = [{"key": f"k{i}", "text": f"memory number {i} about tea"} for i in range(50)]
    with pytest.raises(RuntimeError):
        store.write_many(items, tenant="t", subject="s", purpose="p")
    monkeypatch.setattr(store._derivations, "on_write", real)
    assert len(seen) == 30  # its rows were upserted before the body failed
    assert store.read("k0", tenant="t", purpose="p") is None
    assert store.scan(tenant="t", purpose="p", limit=100) == [store.read("seed", tenant="t", purpose="p")]
    assert [h.key for h in store.recall("memory about tea", tenant="t", purpose="p", k=5)] == ["seed"]
    assert store.write_many(items[:3], tenant="t", subject="s", purpose="p") == first + 1
    got = {h.key for h in store.recall("memory about tea", tenant="t", purpose="p", k=5)}
    assert got == {"seed", "k0", "k1", "k2"}


def test_a_write_queued_behind_a_registration_sees_the_subject(store):
    # register_subject changes the in-memory mention matcher after its commit; a write's body
    # reads that matcher, so the registration closes its group and the write runs after it.
    out = queued(
        store,
        [
            lambda: store.register_subject("alice", tenant="t", identifiers=["Alice Moreno"]),
            write(store, "note", "Met Alice Moreno about the roadmap", subject="bob"),
        ],
    )
    assert [kind for kind, _ in out] == ["ok", "ok"]
    receipt = store.forget(tenant="t", subject="alice")
    assert list(receipt.quarantined) == ["note"]


def test_forgets_queue_with_the_writes_and_each_closes_its_group(store, groups):
    out = queued_after(
        store,
        groups,
        "x1",
        "to be forgotten",
        "x",
        [
            write(store, "w1", "the first write"),
            lambda: store.forget(tenant="t", key="w1"),  # sees w1, written in its own group
            write(store, "w2", "the second write"),
            lambda: store.forget(tenant="t", subject="x"),
            write(store, "w3", "the third write"),
        ],
    )
    assert [kind for kind, _ in out] == ["ok"] * 5
    first, second = out[1][1], out[3][1]
    assert list(first.erased) == ["w1"] and list(second.erased) == ["x1"]
    assert out[0][1] < first.epoch < out[2][1] < second.epoch < out[4][1]
    groups.check(3)  # [w1, forget], [w2, forget], [w3]
    assert store.read("w1", tenant="t", purpose="p") is None
    assert store.read("x1", tenant="t", purpose="p") is None
    assert store.read("w2", tenant="t", purpose="p").text == "the second write"
    assert store.status(second.handle).handle == second.handle


# -- the store's lock -----------------------------------------------------------------------------
def in_a_thread(call: Callable[[], Any]) -> Any:
    """``call()``'s result, from another thread (the join's deadline only stops a hang)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(60)
    assert out, "the call never returned (a deadlock at the chokepoint?)"
    return out[0]


def test_the_store_lock_knows_which_thread_holds_it():
    lock = StoreLock()
    assert not lock.held()
    with lock:
        with lock:  # re-entrant
            assert lock.held()
        assert lock.held()  # the inner release does not let go
        assert in_a_thread(lock.held) is False
    assert not lock.held()
    with pytest.raises(RuntimeError):
        lock.release()  # not held: refused, as threading.RLock refuses it
    assert in_a_thread(lambda: lock.acquire() and lock.held())  # free for the next thread


def test_a_due_expiry_swept_inside_a_groups_run_does_not_wait_for_its_own_leader(store, clock):
    # The leader sweeps due expiries first, under the store's lock: their mutations come back
    # to the chokepoint from that thread and must run at once, not queue behind it.
    store.write("short", "a memory with a ttl", tenant="t", subject="s", purpose="p", ttl=60)
    clock.advance(120)
    epoch = in_a_thread(lambda: store.write("next", "the next memory", tenant="t", subject="s", purpose="p"))
    assert store.read("short", tenant="t", purpose="p") is None
    assert store.read("next", tenant="t", purpose="p").text == "the next memory"
    (expiry,) = [r for r in store.receipts() if r["kind"] == "expire"]
    assert expiry["epoch"] < epoch


# -- a full disk under a group (the small_disk fixture: conftest.py) ---------------------------
def test_a_group_on_a_full_disk_loses_no_acknowledged_write_and_keeps_no_refused_one(small_disk):
    root = small_disk / "store"
    s = efface.open(root, embedder="hashing", background=False)
    s.write("k0", "the first memory", tenant="t", subject="s", purpose="p")
    with contextlib.suppress(OSError), open(small_disk / "ballast", "wb", buffering=0) as f:
        while os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize > 700 << 10:
            f.write(b"\0" * 65536)
    texts = {f"k{i}": f"memory {i} " + os.urandom(60_000).hex() for i in range(1, 13)}
    out = queued(s, [write(s, k, t) for k, t in texts.items()])
    refused = [k for k, (kind, _) in zip(texts, out, strict=True) if kind == "error"]
    assert refused, "the disk did not fill: make the texts bigger"
    for kind, value in out:
        assert kind == "ok" or isinstance(value, StoreUnwritable), value
    with contextlib.suppress(StoreUnwritable):
        s.close()
    s.close()
    (small_disk / "ballast").unlink()
    with efface.open(root, embedder="hashing", background=False) as s:
        assert s.read("k0", tenant="t", purpose="p").text == "the first memory"
        for k, (kind, _) in zip(texts, out, strict=True):
            found = s.read(k, tenant="t", purpose="p")
            assert (found.text if found else None) == (texts[k] if kind == "ok" else None)
