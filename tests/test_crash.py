"""Crash test: kill -9 a process in the middle of writes, forgets and compactions, reopen
the store, and hold it to invariant 6 (docs/concepts.md §4): no acknowledged write is lost, no
acknowledged erasure is resurrected, the ledger is whole.

``crash_worker.py`` runs a seeded random sequence of operations on a store (background
compactor on) and prints each one before the call and again once it returned. The parent
kills it with SIGKILL at a random moment (or just after a large write_many, or a compaction
with many erasures pending in the vector index, has begun), replays the acknowledged
operations into the reference model, and reopens the store. Only the one operation in
flight at the kill may or may not have applied, and it applies whole or not at all: the
reopened store must match the model with it, or the model without it. Then:

* every (tenant, key, purpose) reads back exactly as that model says (acknowledged writes
  are there with their text; acknowledged erasures are unreadable);
* recall, queried with the texts of (sampled) erased and live records, returns only keys
  live in the model, each with the model's text, and finds the live ones;
* the reloaded vector index holds exactly the live records;
* every acknowledged forget's receipt is found by ``status()``, and the ledger's hash
  chain verifies with one entry per applied forget;
* a second reopen (recovery is idempotent) and a compaction give the same answers.

Every test runs on the SQLite origin and on the PostgreSQL one (the ``backend`` fixture,
parametrised indirectly with the seeds each runs): there the worker opens the store in a
database of its own with its cache directory, and the reopen uses that directory again. On
PostgreSQL fewer seeds run (a round opens stores on a real server and each read is a round
trip); ``tests/postgres/test_multi_crash.py`` adds two processes on one database and a
longer loop. Every crash test is a ``slow`` one (``conftest.py``): CI runs a bounded sample of
the seeds (4 of 8 random kills on SQLite, 2 of 3 on PostgreSQL; 2 of 3 large writes and
compactions on SQLite), ``EFFACE_SLOW=1`` all of them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

import efface
from efface.paths.ann import SENTINEL_BASE, VectorIndex

from conftest import ann_vectors, bounded

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from crash_worker import PG_KEK, PG_URL, PURPOSES, TENANTS, generated_items  # noqa: E402
from reference_model import ModelKeyInUse, ModelNotFound, ModelUnknownPurpose, ReferenceModel  # noqa: E402

WORKER = os.path.join(HERE, "crash_worker.py")
K = 50
LIVE_SAMPLE = 40
ERASED_SAMPLE = 80
"""Live and erased records per check whose text is used as a recall query (every one of
them is checked by point reads)."""


@dataclass
class Run:
    """What the parent saw of one worker's life."""

    acked: list[tuple[dict, dict]] = field(default_factory=list)
    in_flight: dict | None = None
    stderr: str = ""


@dataclass
class Target:
    """Where a round's store lives: a directory per store (SQLite), or a PostgreSQL database
    (``url``, with the key file ``kek``) that every store path of the round is a cache
    directory of."""

    url: str | None = None
    kek: str | None = None

    def env(self) -> dict[str, str]:
        """The worker's environment."""
        env = dict(os.environ)
        env.pop(PG_URL, None)
        if self.url is not None:
            env.update({PG_URL: self.url, PG_KEK: str(self.kek)})
        return env

    def open(self, path: str, **options) -> efface.Store:
        options.setdefault("background", False)
        if self.url is not None:
            return efface.open(self.url, embedder="hashing", kek_file=self.kek, cache_dir=path, **options)
        return efface.open(path, embedder="hashing", **options)


SQLITE = Target()


class Worker:
    """One crash worker process, and what the parent saw of its life."""

    def __init__(self, store_dir: str, seed: int, mode: str, target: Target = SQLITE, tenants=TENANTS):
        self.err_path = store_dir + ".stderr"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, WORKER, store_dir, str(seed), mode, ",".join(tenants)],
                stdout=subprocess.PIPE,
                stderr=err,
                env=target.env(),
            )
        self.lines: list[dict] = []
        self._changed = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if not raw.endswith(b"\n"):
                break  # a line cut by the kill was never fully printed: it does not count
            with self._changed:
                self.lines.append(json.loads(raw))
                self._changed.notify_all()
        with self._changed:
            self._eof = True  # the worker died (on its own, or killed)
            self._changed.notify_all()

    def until(self, trigger: Callable[[dict], bool], timeout: float = 120.0, start: int = 0) -> bool:
        """Wait until a printed line from the ``start``-th on makes ``trigger`` true (False:
        the worker died first, or ``timeout`` passed)."""
        seen = start
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                while seen < len(self.lines):
                    if trigger(self.lines[seen]):
                        return True
                    seen += 1
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    return False
                self._changed.wait(left)

    def acked(self) -> int:
        with self._changed:
            return sum(1 for line in self.lines if line["ev"] == "ack")

    def kill(self) -> Run:
        """SIGKILL it; returns the acknowledged operations and the one in flight."""
        died_on_its_own = self.proc.poll() is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        with open(self.err_path, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
        assert not died_on_its_own, f"the worker exited before the kill (rc={self.proc.returncode}):\n{stderr}"
        assert self.proc.returncode == -signal.SIGKILL
        lines = self.lines
        assert lines and lines[0] == {"ev": "ready"}, f"the worker never got ready:\n{stderr}"

        run = Run(stderr=stderr)
        begun: dict | None = None
        for line in lines[1:]:
            if line["ev"] == "begin":
                assert begun is None, "two operations in flight at once"
                begun = line
            else:
                assert begun is not None and line["i"] == begun["i"]
                run.acked.append((begun["op"], line["res"]))
                begun = None
        run.in_flight = None if begun is None else begun["op"]
        return run


def run_worker(store_dir: str, seed: int, mode: str, trigger, delay: float, target: Target = SQLITE) -> Run:
    """Start the worker; once ``trigger(line)`` is true for a printed line, wait ``delay``
    seconds and SIGKILL it. Returns the acknowledged operations and the one in flight."""
    worker = Worker(store_dir, seed, mode, target)
    worker.until(trigger)
    time.sleep(delay)
    return worker.kill()


# -- the model side ----------------------------------------------------------------------------
def apply(model: ReferenceModel, op: dict) -> dict:
    """Apply one operation to the model; returns what the store should have answered."""
    kind, tenant = op["kind"], op.get("tenant")
    if kind == "write":
        try:
            model.write(
                tenant, op["key"], op["text"], subject=op["subject"], purpose=op["purpose"], basis=op["basis"], now=0.0
            )
        except ModelKeyInUse:
            return {"key_in_use": True}
        return {}
    if kind == "write_many":
        items = generated_items(op["gen"]) if "gen" in op else op["items"]
        try:
            model.write_many(tenant, [dict(item, ttl=None) for item in items], now=0.0)
        except ModelKeyInUse:
            return {"key_in_use": True}
        return {}
    if kind == "retain":
        try:
            model.retain(tenant, op["key"], subject=op["subject"], purpose=op["purpose"], basis=op["basis"], now=0.0)
        except ModelNotFound:
            return {"not_found": True}
        return {}
    if kind == "forget":
        try:
            outcome = model.forget(tenant, now=0.0, **op["selector"])
        except ModelUnknownPurpose:
            return {"unknown_purpose": True}
        return {"outcome": outcome}
    assert kind == "compact", kind
    return {}


@dataclass
class Replay:
    before: ReferenceModel
    """The model with every acknowledged operation."""
    after: ReferenceModel | None
    """The model with the in-flight operation applied too (None: nothing was in flight)."""
    handles: dict[str, tuple[str, frozenset]]
    """handle -> (tenant, erased keys) of every acknowledged forget."""
    erased: list[tuple[str, str, str]]
    """(tenant, key, text) of every record an acknowledged forget erased."""
    keys: dict[str, set[str]]
    """Every key any operation named, per tenant."""
    in_flight: dict | None


def replay(run: Run, tenants: tuple[str, ...] = TENANTS, since: tuple[Replay, ReferenceModel] | None = None) -> Replay:
    """The models of ``run``; ``since``: an earlier life of the same store (its replay, and
    the model the store turned out to match after it), which this run continued."""
    model = ReferenceModel() if since is None else since[1].clone()
    handles = {} if since is None else dict(since[0].handles)
    erased = [] if since is None else list(since[0].erased)
    keys: dict[str, set[str]] = {t: set() for t in tenants}
    if since is not None:
        for t, ks in since[0].keys.items():
            keys.setdefault(t, set()).update(ks)

    def note_keys(op):
        if op["kind"] == "write_many":
            items = generated_items(op["gen"]) if "gen" in op else op["items"]
            keys[op["tenant"]].update(i["key"] for i in items)
        elif "key" in op:
            keys[op["tenant"]].add(op["key"])

    for op, res in run.acked:
        note_keys(op)
        expected = apply(model, op)
        if op["kind"] in ("write", "write_many"):
            assert res.get("key_in_use", False) == expected.get("key_in_use", False), (op, res)
        if op["kind"] == "retain":
            assert res.get("not_found", False) == expected.get("not_found", False), (op, res)
        if op["kind"] == "forget":
            assert res.get("unknown_purpose", False) == expected.get("unknown_purpose", False), (op, res)
            if "outcome" in expected:
                outcome = expected["outcome"]
                assert len(res["erased"]) == len(set(res["erased"]))
                assert set(res["erased"]) == outcome.erased, (op, sorted(res["erased"]), sorted(outcome.erased))
                assert res["released"] == sum(outcome.released.values())
                handles[res["handle"]] = (op["tenant"], outcome.erased)
                erased += [(op["tenant"], k, t) for k, t in outcome.erased_texts.items()]
    after = None
    if run.in_flight is not None:
        note_keys(run.in_flight)
        after = model.clone()
        outcome = apply(after, run.in_flight).get("outcome")
        if outcome is not None:
            erased += [(run.in_flight["tenant"], k, t) for k, t in outcome.erased_texts.items()]
    return Replay(model, after, handles, erased, keys, run.in_flight)


def _brief(op: dict | None) -> str:
    if op is None:
        return "(none was in flight)"
    return json.dumps({k: v for k, v in op.items() if k != "items"})


# -- the store side ----------------------------------------------------------------------------
def observed(store, keys: dict[str, set[str]]) -> dict:
    """Everything a point read can see: (tenant, purpose, key) -> text, or 'unknown purpose'."""
    out = {}
    for tenant in keys:
        for purpose in PURPOSES:
            for key in sorted(keys[tenant]):
                try:
                    got = store.read(key, tenant=tenant, purpose=purpose)
                except efface.UnknownPurpose:
                    out[(tenant, purpose)] = "unknown purpose"
                    break
                if got is not None:
                    out[(tenant, purpose, key)] = got.text
    return out


def expected_view(model: ReferenceModel, keys: dict[str, set[str]]) -> dict:
    out = {}
    for tenant in keys:
        for purpose in PURPOSES:
            if purpose not in model.purposes.get(tenant, ()):
                if keys[tenant]:
                    out[(tenant, purpose)] = "unknown purpose"
                continue
            for key, text in model.visible(tenant, purpose, 0.0).items():
                out[(tenant, purpose, key)] = text
    return out


def diff(seen: dict, want: dict, limit: int = 8) -> str:
    lines = [
        f"{k}: store {seen.get(k)!r}, model {want.get(k)!r}"
        for k in sorted(set(seen) | set(want), key=repr)
        if seen.get(k) != want.get(k)
    ]
    return "\n".join(lines[:limit]) + (f"\n... {len(lines) - limit} more" if len(lines) > limit else "")


def check_store(store_dir: str, rp: Replay, rng: random.Random, target: Target = SQLITE) -> ReferenceModel:
    """Reopen and check everything; returns the model the store turned out to match."""
    store = target.open(store_dir)
    try:
        (model,) = check_parts(store, [rp], rng)
        return model
    finally:
        store.close()


def check_parts(store, parts: list[Replay], rng: random.Random) -> list[ReferenceModel]:
    """Check an opened store against ``parts``: the replays of workers that wrote to disjoint
    tenants of it (one worker: one part). Returns the model each part turned out to match."""
    tenants = [t for rp in parts for t in rp.keys]
    # Opening reloaded the vector index from its saved files and replayed the change log:
    # it must hold exactly the live records (no write lost, no erasure left behind).
    # Recall cannot tell a vector the index lost from one it holds but cannot reach
    # (a separate defect, see test_ann_reachability.py), so this looks inside.
    # (On PostgreSQL the vectors are rows searched through the database's own index: there is
    # no index of the process's to drift from the records, and the checks below cover recall.)
    for tenant in tenants if isinstance(store._ann, VectorIndex) else ():
        tid = store._tenant(tenant)  # below the facade a tenant is known by its keyed id
        live_ids = {rid for rid, _blob in store._origin.records_of_tenant(tid)}
        index = store._ann._index(tid)
        lost = sorted(rid for rid in live_ids if rid not in index)
        assert not lost, f"after recovery the vector index lacks live records {lost[:10]} ({tenant})"
        # (scrub noise under reserved labels stays until the next rebuild; size() leaves it out)
        records = [int(k) for k in index.keys if int(k) < SENTINEL_BASE]
        assert len(records) == len(live_ids) == ann_vectors(store, tenant), (
            f"after recovery the vector index holds {len(records)} vectors for {len(live_ids)} live records"
        )
    matchings = [_check_part(store, rp, rng) for rp in parts]
    ledgers = [{m.ledger_entries for m in matching} for matching in matchings]

    # The ledger: one entry per applied forget, whichever worker's.
    chain = store.verify_ledger()
    assert chain.ok, chain.problems
    totals = {0}
    for counts in ledgers:
        totals = {t + c for t in totals for c in counts}
    assert chain.entries in totals, (chain.entries, sorted(totals))
    # The model each part goes on from: one that agrees with the ledger too (a forget in doubt
    # that matched nothing leaves the records as they were, and only its ledger entry tells).
    models = [m[0] for m in matchings]
    if len(matchings) == 1:
        models = [next(m for m in matchings[0] if m.ledger_entries == chain.entries)]
    ledger_handles = {e["handle"] for e in store.ledger()}
    for rp in parts:
        assert set(rp.handles) <= ledger_handles
    return models


def _check_part(store, rp: Replay, rng: random.Random) -> list[ReferenceModel]:
    seen = observed(store, rp.keys)
    candidates = [rp.before] + ([rp.after] if rp.after is not None else [])
    matching = [m for m in candidates if expected_view(m, rp.keys) == seen]
    assert matching, (
        "after the crash the store matches neither the acknowledged state nor the acknowledged "
        f"state plus the in-flight operation {_brief(rp.in_flight)}:\n"
        + diff(seen, expected_view(candidates[-1], rp.keys))
    )
    model = matching[0]
    for tenant, key, _text in rp.erased:
        if (tenant, key) not in model.records:  # not written again since
            for purpose in sorted(model.purposes.get(tenant, ())):
                assert store.read(key, tenant=tenant, purpose=purpose) is None, (
                    f"an acknowledged erasure came back after the crash: {key!r} ({tenant}/{purpose})"
                )

    # Receipts.
    for handle, (_tenant, erased) in rp.handles.items():
        status = store.status(handle)
        assert status.kind == "forget" and status.counts["erased"] == len(erased)

    # Recall: erased texts are never served; live records are found by their words.
    erased = sorted((t, text) for t, _k, text in rp.erased)
    queries = rng.sample(erased, min(ERASED_SAMPLE, len(erased)))
    live = sorted((t, rec.text) for (t, _k), rec in model.records.items())
    queries += rng.sample(live, min(LIVE_SAMPLE, len(live)))
    for tenant, query in queries:
        for purpose in sorted(model.purposes.get(tenant, ())):
            visible = model.visible(tenant, purpose, 0.0)
            hits = store.recall(query, tenant=tenant, purpose=purpose, k=K)
            for h in hits:
                assert h.key in visible, f"recall served {h.key!r} ({tenant}/{purpose}), not live in the model"
                assert h.text == visible[h.key], f"recall served stale text for {h.key!r}"
            if len(visible) <= K:
                # Room for every live record: the one with this exact text must be
                # found (full-text search always proposes it). In big tenants fusion
                # with the approximate vector index may rank it out; that is quality,
                # not durability, and not checked here.
                for key, text in visible.items():
                    if text == query:
                        assert key in {h.key for h in hits}, f"recall lost live record {key!r}"
    return matching


def crash_round(tmp_path, seed: int, mode: str, trigger, delay: float, reopen_twice: bool = False, target=SQLITE):
    store_dir = str(tmp_path / f"store-{mode}-{seed}")
    run = run_worker(store_dir, seed, mode, trigger, delay, target)
    rp = replay(run)
    rng = random.Random(seed)
    model = check_store(store_dir, rp, rng, target)
    if reopen_twice:
        # Recovery is idempotent: open and close again (which saves the recovered state),
        # then the same checks, then once more after a compaction.
        target.open(store_dir).close()
        again = check_store(store_dir, rp, rng, target)
        assert again is model, "a second recovery changed the store's state"
        with target.open(store_dir) as store:
            store.compact()
            for handle in rp.handles:
                assert store.status(handle).settled
        assert check_store(store_dir, rp, rng, target) is model
    return run, rp, model


@pytest.fixture
def target(backend, request, tmp_path) -> Iterator[Target]:
    """Where this test's stores live, on the ``backend`` fixture's origin (sqlite or postgres:
    the memory origin keeps nothing a crash could lose)."""
    if backend == "sqlite":
        yield SQLITE
        return
    assert backend == "postgres", backend
    from conftest import PgStores

    stores = PgStores(request.getfixturevalue("pg"), tmp_path)
    try:
        yield Target(stores.url("crash"), str(stores.kek_file))
    finally:
        stores.drop()


def on(sqlite: range, postgres: range) -> Callable:
    """Parametrise ``backend`` (indirectly: the fixture's markers and skips apply) and ``seed``:
    every seed of ``sqlite`` on SQLite, the bounded sample ``postgres`` on PostgreSQL. Crash
    loops are ``slow`` tests: callers give ``bounded(sample, whole)`` ranges, CI runs the
    sample, ``EFFACE_SLOW=1`` every seed."""
    params = pytest.mark.parametrize(
        ("backend", "seed"),
        [("sqlite", s) for s in sqlite] + [("postgres", s) for s in postgres],
        indirect=["backend"],
    )
    return lambda test: pytest.mark.slow(params(test))


def _is(kind: str, big: bool = False):
    def trigger(line: dict) -> bool:
        return line["ev"] == "begin" and line["op"]["kind"] == kind and (not big or "gen" in line["op"])

    return trigger


def _ready(line: dict) -> bool:
    return line["ev"] == "ready"


@on(sqlite=bounded(range(4), range(8)), postgres=bounded(range(2), range(3)))
def test_kill_at_random_moment(tmp_path, seed, target):
    rng = random.Random(1000 + seed)
    crash_round(tmp_path, seed, "mixed", _ready, rng.uniform(0.1, 1.2), reopen_twice=seed % 4 == 0, target=target)


@on(sqlite=bounded(range(2), range(3)), postgres=range(1))
def test_kill_during_large_write_many(tmp_path, seed, target):
    rng = random.Random(2000 + seed)
    run, _, _ = crash_round(
        tmp_path,
        100 + seed,
        "bigbatch",
        _is("write_many", big=True),
        rng.uniform(0.0, 0.8),
        reopen_twice=seed == 0,
        target=target,
    )
    assert run.acked, "the worker acknowledged nothing before the kill"


@on(
    sqlite=bounded(range(2), range(3)), postgres=range(1, 2)
)  # on postgres without the double reopen: each check reads 1,500 keys
def test_kill_during_compaction_with_pending_erasures(tmp_path, seed, target):
    rng = random.Random(3000 + seed)
    count = {"n": 0}
    nth = 1 + seed % 2  # the first or the second compaction that starts with erasures pending

    def trigger(line):
        if _is("compact")(line) and line["op"]["erasures_pending"]:
            count["n"] += 1
        return count["n"] >= nth

    run, _, _ = crash_round(
        tmp_path, 200 + seed, "compact", trigger, rng.uniform(0.0, 0.09), reopen_twice=seed == 0, target=target
    )
    pending = [res["pending"] for op, res in run.acked if op["kind"] == "forget"]
    if target is SQLITE:  # (on PostgreSQL the vectors leave the database's index in the forget's
        # transaction: what a compaction still owes is the maintenance that removes the bytes)
        assert pending and min(pending) >= 500, f"erasures were not pending when compaction began: {pending}"
    else:
        assert pending, "no forget was acknowledged before the kill"
