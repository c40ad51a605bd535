"""Group commit at the store's chokepoint (:meth:`efface.store.Store._mutate`).

Every mutation is an origin transaction whose commit is durable before it is acknowledged:
on SQLite, ``synchronous=FULL`` fsyncs the WAL at each commit. Under concurrent writers (a
served store's write lane) that fsync, not the work, bounds the mutations per second: one at
a time, ~10 ms each on this machine's disk. So a mutation that arrives while another holds
the chokepoint waits in a queue (:class:`Chokepoint`), and the next thread to take the store's
lock, the *leader*, runs every queued mutation in arrival order in one origin transaction
(``Origin.group``, when the origin has it), each in a savepoint of its own with its own epoch,
and commits them with one fsync. A leader with one mutation only (a single caller's import)
runs it without a savepoint: if it raises, the whole transaction goes, which is all of it (a
savepoint journals every page its statements change, 2-3x the cost of an import's inserts).

Each caller still gets its own answer: its epoch and result, or its own error. A mutation
whose body raises is rolled back alone (its savepoint) and the others commit; when the commit
itself fails, every member of the group gets that error, as none of them was acknowledged. No
caller returns before the commit that holds its mutation is durable, so a forget's receipt
still means its tombstones are on disk.

A mutation with an ``after`` hook (in-memory state that must follow the origin, such as the
mention index a later write's body reads) closes its group: the group commits, the hook runs,
and the mutations behind it start the next group, so each body sees the state every earlier
mutation left, as if they had run one by one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from threading import get_ident
from typing import Any

from .errors import EffaceError
from .origin.capabilities import GroupCommit

INTERRUPTED = "the write was interrupted before it was committed: nothing of it was kept; send it again"


@dataclasses.dataclass(eq=False)
class Job:
    """One mutation waiting at the chokepoint, and (once ``done``) its answer."""

    kind: str
    tenant: str | None
    body: Callable[[Any, float], tuple[Any, list, list, dict]]
    after: Callable[[Any], None] | None
    sweep: bool
    done: bool = False
    epoch: int = 0
    result: Any = None
    changed: bool = False
    erased: bool = False
    error: BaseException | None = None
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    lead: bool = False

    def answer(self) -> tuple[int, Any]:
        if self.error is not None:
            raise self.error
        return self.epoch, self.result


class StoreLock:
    """The store's lock: re-entrant, and able to say whether the calling thread holds it
    (:meth:`held`), which the chokepoint must know to tell a thread already inside the
    store from one that must queue. ``threading.RLock`` knows it too, only not in public.

    The owner and the depth are written only by the thread that holds the lock, so another
    thread reading ``_owner`` sees its own id there only while it holds the lock itself."""

    __slots__ = ("_depth", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> bool:
        me = get_ident()
        if self._owner != me:
            self._lock.acquire()
            self._owner = me
        self._depth += 1
        return True

    def release(self) -> None:
        if self._owner != get_ident():
            raise RuntimeError("the store's lock is released by a thread that does not hold it")
        self._depth -= 1
        if not self._depth:
            self._owner = None  # before the release: no other thread may see itself as owner
            self._lock.release()

    def held(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._owner == get_ident()

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


Member = Callable[[str, "str | None", float], AbstractContextManager[Any]]


class Chokepoint:
    """The queue in front of the store's lock, and who leads the next group.

    Followers wait on their own job's event, not on the lock: the leader wakes every member
    of its group at once when the group is done, and hands the lead to the first job queued
    meanwhile. (Waiting on the lock instead would wake the members one after another, each
    taking and releasing it only to find its work done: on a busy machine every such
    hand-over waits for a core, and the whole group waits for all of them.)"""

    def __init__(self, lock: StoreLock) -> None:
        self._lock = lock
        self._queue: list[Job] = []
        self._mu = threading.Lock()
        self._leading = False
        self._running: int | None = None

    def submit(self, job: Job, run: Callable[[list[Job]], None]) -> tuple[int, Any]:
        """Queue ``job`` and wait for its answer, leading a group when it is this job's turn:
        ``run`` gets every job queued so far, under the store's lock. A thread that holds the
        store's lock already cannot wait for a leader (who needs that lock): inside a group's
        run (the leader sweeping expiries first) its job runs at once, alone; otherwise (a
        forget, a sweep) it runs what is queued and then its own job itself."""
        if self._lock.held():
            if self._running == threading.get_ident():
                run([job])
            else:
                with self._mu:
                    queued, self._queue = [*self._queue, job], []
                self._run(queued, run)
            return job.answer()
        with self._mu:
            self._queue.append(job)
            lead = not self._leading
            self._leading = True
        if not lead:
            job.ready.wait()  # done by a leader, or handed the lead
            if not job.lead:
                return job.answer()
        jobs: list[Job] = []
        try:
            with self._lock:
                with self._mu:  # taken only now: what queued while the lock was busy joins in
                    jobs, self._queue = self._queue, []
                self._run(jobs, run)
        finally:
            with self._mu:
                if self._queue:
                    self._queue[0].lead = True  # it leads the next group, done or not by then
                    self._queue[0].ready.set()
                else:
                    self._leading = False
        return job.answer()

    def _run(self, jobs: list[Job], run: Callable[[list[Job]], None]) -> None:
        self._running = threading.get_ident()
        try:
            run(jobs)
        finally:
            self._running = None
            for j in jobs:
                if not j.done:  # a BaseException in the leader: what did not commit says so
                    j.error, j.done = EffaceError(INTERRUPTED), True
                j.ready.set()


@contextlib.contextmanager
def _one_each(origin: Any) -> Iterator[Member]:
    """For an origin without ``group``: each member its own transaction."""
    yield origin.transaction


def stage(tx: Any, tenant: str | None, puts: list, drops: list, texts: dict, paths: Sequence[Any]) -> None:
    """Stage a member's content changes inside its savepoint: the change log that the
    asynchronous read paths replay, and every synchronous path (the word index)."""
    if puts or drops:
        assert tenant is not None, "content changes belong to a tenant"
        tx.log_changes(tenant, puts, drops)
        for path in paths:
            if path.synchronous:
                path.stage(tx, tenant, puts, drops, texts)


ERASURES = frozenset({"forget", "expire"})
"""Mutation kinds that make a receipt: their bytes are erased promptly after the commit."""


def lead(
    jobs: list[Job],
    origin: Any,
    paths: Sequence[Any],
    ann: Any,
    compactor: Any,
    prepare: Callable[[bool], None],
    clock: Callable[[], float],
) -> None:
    """The leader's part of a group (``Store._run_jobs``), under the store lock: every job gets
    its answer. ``prepare(sweep)`` runs first (the store open? due expiries honoured when a
    job asks for the sweep); its error is every job's. Then :func:`run_jobs`, beside which a
    background absorption of ``ann`` stands back; then ``compactor`` is woken for what changed."""
    with ann.writing():  # a background absorption stands back meanwhile
        try:
            prepare(any(j.sweep for j in jobs))
        except Exception as exc:
            for j in jobs:
                j.error, j.done = exc, True
            return
        run_jobs(origin, jobs, clock(), paths)
    if any(j.changed for j in jobs):
        # Committed and fsynced: acknowledged. Asynchronous paths (ANN) absorb it in the
        # compactor; recall catches them up on new content first (read-your-writes), and
        # reads are safe meanwhile because every candidate is resolved in the origin.
        ann.touch()  # writes are streaming in: a background absorption stands back
    woken = [j for j in jobs if j.changed or (j.error is None and j.kind in ERASURES)]
    if woken:
        # An erasure's bytes are due soon even when it dropped no record (identifiers
        # only, or every record under hold): wait(until="erased") depends on it.
        compactor.wake(erased=any(j.erased or j.kind in ERASURES for j in woken))


def run_jobs(origin: Any, jobs: list[Job], now: float, paths: Sequence[Any]) -> None:
    """Run ``jobs`` in order in as few origin transactions as their ``after`` hooks allow (see
    the module docstring), each member's content changes staged on ``paths`` inside its
    savepoint (:func:`stage`). Every job is ``done`` on return, with its answer or error."""
    group = origin.group if isinstance(origin, GroupCommit) else None
    i = 0
    while i < len(jobs):
        chunk: list[Job] = []
        try:
            with group(len(jobs) - i) if group is not None else _one_each(origin) as member:
                for job in jobs[i:]:
                    chunk.append(job)
                    try:
                        with member(job.kind, job.tenant, now) as tx:
                            result, puts, drops, texts = job.body(tx, now)
                            stage(tx, job.tenant, puts, drops, texts, paths)
                    except Exception as exc:  # this member only: its savepoint is rolled back
                        job.error = exc
                        continue
                    job.epoch, job.result = tx.epoch, result
                    job.changed, job.erased = bool(puts or drops), bool(drops)
                    if job.after is not None:
                        break
        except Exception as exc:  # the group did not commit: none of its members stays
            for job in chunk:
                if job.error is None:
                    job.error, job.changed = exc, False
        i += len(chunk)
        for job in chunk:
            if job.error is None and job.after is not None:
                try:
                    job.after(job.result)
                except Exception as exc:  # committed, but the caller must hear of the failure
                    job.error = exc
            job.done = True
