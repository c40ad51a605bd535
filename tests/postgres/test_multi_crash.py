"""``kill -9`` of efface processes on one PostgreSQL database (issue #34 item 4), with the
machinery of ``tests/test_crash.py`` (the worker, the replay into the reference model, the
checks after a restart):

* two worker processes write, retain, forget and compact on one database, each in tenants of
  its own (so each one's acknowledged operations make a model of their own); one is killed at
  a random moment and the other must keep serving (it acknowledges more operations, a forget
  among them), then it is killed too. Both restart (each with its cache directory: its files
  replay the change log the survivor kept for it): nothing either acknowledged is lost,
  nothing either erased is served again, each vector index holds exactly the live records,
  the ledger holds every forget of both;
* a longer loop: one store killed and restarted again and again, each life continuing the
  last (``EFFACE_CRASH_ROUNDS`` lives; else 3, or 10 with ``EFFACE_SLOW=1``).

Both are ``slow`` tests (``conftest.py``): CI runs seed 0 of the first and 3 lives of the second,
``EFFACE_SLOW=1`` both seeds and 10 lives.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from test_crash import Replay, Target, Worker, _ready, check_parts, replay

from conftest import bounded

TENANTS_A = ("acme", "globex")
TENANTS_B = ("initech", "umbrella")
MORE = 12
"""Operations the surviving worker must acknowledge after the other was killed."""


@pytest.fixture
def target(pg, tmp_path):
    from conftest import PgStores

    stores = PgStores(pg, tmp_path)
    try:
        yield Target(stores.url("multi-crash"), str(stores.kek_file))
    finally:
        stores.drop()


def _serves_on(worker: Worker, start: int):
    """A trigger: ``MORE`` operations acknowledged from line ``start`` on, a forget among them."""
    seen = {"acks": 0, "forgets": 0}

    def trigger(line: dict) -> bool:
        if line["ev"] == "ack":
            seen["acks"] += 1
            seen["forgets"] += "handle" in line["res"]
        return seen["acks"] >= MORE and seen["forgets"] >= 1

    return trigger


@pytest.mark.slow
@pytest.mark.parametrize("seed", bounded(range(1), range(2)))
def test_kill_one_of_two_processes_while_the_other_serves(tmp_path, target, seed):
    rng = random.Random(4000 + seed)
    dir_a, dir_b = str(tmp_path / "a"), str(tmp_path / "b")
    a = Worker(dir_a, 400 + seed, "mixed", target, TENANTS_A)
    b = Worker(dir_b, 450 + seed, "mixed", target, TENANTS_B)
    try:
        assert a.until(_ready) and b.until(_ready), "a worker never got ready"
        time.sleep(rng.uniform(0.2, 1.2))
        run_a = a.kill()
        start = len(b.lines)
        assert b.until(_serves_on(b, start), start=start), (
            f"the other process stopped serving after the first was killed ({b.acked()} acknowledged)"
        )
        time.sleep(rng.uniform(0.0, 0.5))
        run_b = b.kill()
    finally:
        for w in (a, b):
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
    assert run_a.acked, "the first worker acknowledged nothing before the kill"
    parts = [replay(run_a, TENANTS_A), replay(run_b, TENANTS_B)]
    check_rng = random.Random(seed)
    # Each restarts with its own cache directory (its saved files, the change log since).
    with target.open(dir_a) as store:
        models = check_parts(store, parts, check_rng)
    with target.open(dir_b) as store:
        assert check_parts(store, parts, check_rng) == models


@pytest.mark.slow
def test_kill_and_restart_one_store_again_and_again(tmp_path, target):
    rounds = int(os.environ.get("EFFACE_CRASH_ROUNDS", bounded(3, 10)))
    rng = random.Random(5000)
    store_dir = str(tmp_path / "store")
    since: tuple[Replay, object] | None = None
    for life in range(rounds):
        worker = Worker(store_dir, 500 + life, "mixed", target)
        try:
            assert worker.until(_ready), "the worker never got ready"
            time.sleep(rng.uniform(0.1, 1.2))
            run = worker.kill()
        finally:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait()
        rp = replay(run, since=since)  # type: ignore[arg-type]
        with target.open(store_dir) as store:
            (model,) = check_parts(store, [rp], random.Random(life))
        # The next life continues from the state the store turned out to hold.
        since = (
            Replay(model, None, rp.handles, rp.erased, rp.keys, None),
            model,
        )
