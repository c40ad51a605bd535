"""The maintenance's WAL pass: switching the WAL past every segment the server kept from before
the erasure's rewrite (:mod:`.maintenance` step 4; docs/postgres.md, "What PostgreSQL keeps
after a delete").

PostgreSQL keeps WAL segments after a checkpoint for several reasons: segments ahead of the
insert position, renamed for reuse without being wiped (as many as ``min_wal_size`` and the
checkpoint's estimate of the next cycle ask, up to about ``max_wal_size``), the last
``wal_keep_size`` of written WAL, what a replication slot has not confirmed, what the archiver
has not archived. Any of them can hold an erased row (the ``DELETE``'s record, page images,
the rewrite's own records). A segment stops holding old bytes once it is written over from
its first byte and switched out of (the switch writes the rest of the segment), or removed.

One round is (a small write, ``pg_switch_wal()``, ``CHECKPOINT``). Where this process reads
the server's ``pg_wal`` (same host), a pass counts nothing in advance: it notes the files there
when it begins, by inode (a segment recycled for reuse is renamed, not copied), and goes on
until each is gone or bears a segment number past the one being written when the pass began
and before the one being written now (written anew and switched out of). Elsewhere it runs a
number of rounds: one more than the segments ``pg_ls_waldir()`` lists (superuser or
``pg_monitor``), else than ``max_wal_size`` and ``wal_keep_size`` hold.

A pass is done in slices of :data:`SLICE_S` seconds, each under the maintenance's advisory
lock, its progress kept in meta (:data:`PROGRESS`) for the next slice, which any server may
run: the compactor's next round does, as the erasure's epoch is not covered until the pass
ends. A pass ends early, with the reason, where more rounds cannot help: segments held by an
inactive replication slot (at once: more switches only add WAL the slot holds too), or
segments from before the pass still kept after the rounds ``wal_keep_size`` accounts for
(an active slot that does not advance, an archiver behind), so a pass never loops for ever.
A promotion's ``.partial`` segments are left out (never written over).

A verification that finds an erasure still in the WAL after its maintenance ended owes that
erasure alone a new pass (:func:`owe`, :data:`OWED`): its erased epoch falls below it
(:func:`erased`), not the later erasures'. None is owed where no pass can help now (a slot or
the archiver keeps the segments, ``.partial`` ones, WAL written after the last pass began), nor
twice for the same find before new WAL is written (:data:`RETAKEN`).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

SEGMENT = re.compile(r"^[0-9A-F]{24}(\.partial)?$")
"""A WAL segment file's name in ``pg_wal`` (not its status folders)."""
PROGRESS = "maintenance.wal"
"""Meta key: the pass under way (JSON of :class:`Pass`), absent when none is."""
OWED = "maintenance.wal_owed"
"""Meta key: the erasures a verification found still in the WAL after the maintenance that
covered them had ended (:func:`owe`), as JSON ``{epoch: {"find": [segment names], "blocked":
bool}}``: a new pass is owed to each, and the origin's erased epoch *for that erasure alone*
stays below it until one ends (:func:`erased`); ``blocked``: a run without the rights to switch
the WAL could not run it (the compactor does not retry it; the next run with them does)."""
RETAKEN = "maintenance.wal_retaken"
"""Meta key: per epoch, the find an owed pass was run for and the segment being written when it
ended (``{epoch: {"find": [...], "end": n}}``): the same find is not owed again until new WAL
is written past it (:func:`owe`)."""
NOTE = "maintenance.note"
"""Meta key: the last finished maintenance run's report (:mod:`.maintenance`)."""
KEPT_RETAKEN = 64
"""Epochs :data:`RETAKEN` remembers (the newest)."""
TICK = "maintenance.tick"
"""Meta key written before each switch (a switch needs WAL written since the last one)."""
SLICE_S = 10.0
"""Seconds of rounds one maintenance run does before it lets the lock go (the pass goes on in
the compactor's next round)."""
STALL_SLACK = 4
"""Rounds past what ``wal_keep_size`` keeps that a pass waits for a kept segment to be recycled
before it names what holds it and ends."""


@dataclass
class Pass:
    """A WAL pass under way (kept in meta between slices)."""

    epoch: int
    """The epoch whose maintenance's rewrite came before this pass."""
    mode: str
    """``files``: segments noted by inode in ``pg_wal``; ``count``: a number of rounds."""
    start: int
    """The segment number being written when the pass began."""
    dirty: list[int] = field(default_factory=list)
    """``files``: the inodes of the segments not passed yet."""
    left: int = 0
    """``count``: the rounds left."""
    rounds: int = 0
    stalled: int = 0
    """Rounds since a segment was last passed."""
    noted: int = 0
    """How many segments (``files``) or rounds (``count``) the pass began with."""
    report: dict[str, Any] = field(default_factory=dict)
    """The maintenance's report so far (its rewrite), recorded in meta when the pass ends."""

    def remaining(self) -> int:
        return len(self.dirty) if self.mode == "files" else self.left


def _segsize(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_size_bytes(current_setting('wal_segment_size'))").fetchone()
    return int(row[0]) if row else 16 * 2**20


def _insert_segment(conn: psycopg.Connection, segsize: int) -> int:
    """The number of the segment the next WAL record goes to (an LSN just past a switch, at a
    segment's first byte, is in the new segment: not ``pg_walfile_name``'s previous one)."""
    row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::numeric").fetchone()
    assert row is not None
    return int(row[0]) // segsize


def segment_number(name: str, segsize: int) -> int:
    """The segment number of a WAL file's name (timeline, then log and segment, 8 hex digits each)."""
    return int(name[8:16], 16) * (2**32 // segsize) + int(name[16:24], 16)


def _files(data_dir: str, segsize: int) -> dict[int, tuple[int, str]]:
    """The segment files in ``pg_wal`` now: inode -> (segment number, name)."""
    out: dict[int, tuple[int, str]] = {}
    with os.scandir(os.path.join(data_dir, "pg_wal")) as it:
        for e in it:
            if SEGMENT.match(e.name):
                try:
                    out[e.inode()] = (segment_number(e.name, segsize), e.name)
                except OSError:
                    continue
    return out


def begin(conn: psycopg.Connection, data_dir: str | None, epoch: int, report: dict[str, Any]) -> Pass:
    """A new pass over what the server holds now (after the rewrite and its checkpoint)."""
    segsize = _segsize(conn)
    start = _insert_segment(conn, segsize)
    if data_dir is not None:
        files = _files(data_dir, segsize)
        # a promotion's .partial segment: the server never writes over it nor removes it, so no
        # round can pass it (left out; a verification that finds an erasure there says so)
        partial = sorted(n for _, n in files.values() if n.endswith(".partial"))
        if partial:
            report["wal_partial"] = (
                f"{len(partial)} .partial WAL segments (left by a promotion) are not switched past: PostgreSQL "
                "never removes them; remove them by hand once no standby needs them"
            )
        dirty = sorted(ino for ino, (_, n) in files.items() if not n.endswith(".partial"))
        return Pass(epoch, "files", start, dirty=dirty, noted=len(dirty), report=report)
    listed: int | None = None
    if conn.execute("SELECT pg_has_role(current_user, 'pg_monitor', 'MEMBER')").fetchone() in ((True,),):
        row = conn.execute("SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'").fetchone()
        listed = int(row[0]) if row else None
    if listed is None:
        row = conn.execute(
            "SELECT ceil(pg_size_bytes(current_setting('max_wal_size'))::numeric / %s)"
            " + ceil(pg_size_bytes(current_setting('wal_keep_size'))::numeric / %s)",
            (segsize, segsize),
        ).fetchone()
        listed = int(row[0]) if row and row[0] is not None else 64
    return Pass(epoch, "count", start, left=listed + 1, noted=listed + 1, report=report)


def load(conn: psycopg.Connection, schema: str) -> Pass | None:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (PROGRESS,)).fetchone()
    if row is None:
        return None
    try:
        return Pass(**json.loads(row[0]))
    except (TypeError, ValueError):  # written by another version: begin again
        return None


def save(conn: psycopg.Connection, schema: str, p: Pass) -> None:
    conn.execute(
        f"INSERT INTO {schema}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        (PROGRESS, json.dumps(asdict(p))),
    )


def _json(conn: psycopg.Connection, schema: str, key: str) -> dict[int, dict[str, Any]]:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (key,)).fetchone()
    if row is None:
        return {}
    try:
        v = json.loads(row[0])
    except ValueError:
        return {}
    if isinstance(v, int):  # an older efface's OWED: the oldest epoch owed
        return {v: {}} if v > 0 else {}
    return {int(k): dict(e) for k, e in v.items()} if isinstance(v, dict) else {}


def _put(conn: psycopg.Connection, schema: str, key: str, value: dict[int, dict[str, Any]]) -> None:
    if not value:
        conn.execute(f"DELETE FROM {schema}.meta WHERE k = %s", (key,))
        return
    conn.execute(
        f"INSERT INTO {schema}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        (key, json.dumps({str(k): v for k, v in sorted(value.items())})),
    )


def _lock_owed(conn: psycopg.Connection, schema: str) -> None:
    """The transaction lock under which :data:`OWED` is read and written (:func:`owe`, :func:`settle`)."""
    conn.execute(f"SELECT pg_advisory_xact_lock(hashtext({schema!r} || '.' || %s))", (OWED,))


def settle(conn: psycopg.Connection, schema: str, passed: bool) -> None:
    """A maintenance run ended (in its transaction that records its note): no progress kept.
    ``passed``: it ended a pass over the WAL as the server held it, which covered every pass
    owed (each find remembered in :data:`RETAKEN` with the segment being written now); else
    (a run without the rights to switch the WAL) the passes owed stay owed, blocked."""
    # the lock :func:`owe` records a pass under: one owed while this ran would be read here,
    # or else deleted unread with the rest below
    _lock_owed(conn, schema)
    conn.execute(f"DELETE FROM {schema}.meta WHERE k = %s", (PROGRESS,))
    owing = _json(conn, schema, OWED)
    if not owing:
        return
    if not passed:
        _put(conn, schema, OWED, {k: {**e, "blocked": True} for k, e in owing.items()})
        return
    end = _insert_segment(conn, _segsize(conn))
    history = _json(conn, schema, RETAKEN)
    history.update({k: {"find": e.get("find", []), "end": end} for k, e in owing.items()})
    _put(conn, schema, RETAKEN, dict(sorted(history.items())[-KEPT_RETAKEN:]))
    _put(conn, schema, OWED, {})


def owe(conn: psycopg.Connection, schema: str, data_dir: str | None, epoch: int, found: list[str]) -> str:
    """A verification found the erasure at ``epoch`` in the WAL segments ``found`` after the
    maintenance that covered it had ended (a pass a slot held, a database maintained by an older
    efface whose rounds stopped at 256). Owes it a new pass (the compactor's next round runs it:
    the erased epoch *for this erasure* falls below it, :func:`erased`) unless no pass can help
    now: a replication slot or the archiver keeps those segments, they are a promotion's
    ``.partial`` segments, they were written after the last pass began (a later write put the
    bytes there again), or a pass owed to the same find already ran and no WAL was written
    since. Returns what the WAL copy's reason adds, in words."""
    names = sorted({os.path.basename(f) for f in found})
    segsize = _segsize(conn)
    whole = [n for n in names if not n.endswith(".partial")]
    if not whole:
        return (
            "found only in .partial segments, which a promotion left and PostgreSQL never removes: no pass over "
            "the WAL can remove them (remove them by hand once no standby needs them); no new pass is owed"
        )
    now = _insert_segment(conn, segsize)
    nums = {n: segment_number(n, segsize) for n in whole}
    noted = _json_note(conn, schema)
    start = noted["wal"].get("start") if isinstance(noted.get("wal"), dict) else None
    slots = _slots(conn, segsize)
    status = os.path.join(data_dir, "pg_wal", "archive_status") if data_dir else None
    why: dict[str, str] = {}  # per segment found, why no pass can take it now
    for name, n in nums.items():
        holder = next(
            (f"{sl!r} ({'active' if on else 'inactive'})" for sl, on, first in slots if first <= n <= now), None
        )
        if holder is not None:  # not ahead of the insert position (no recycled one): kept for the slot
            why[name] = (
                f"replication slot {holder} keeps WAL from before this erasure's maintenance: it leaves pg_wal "
                "once the slot advances past it or is dropped"
            )
        elif status is not None and os.path.exists(os.path.join(status, name + ".ready")):
            why[name] = "segments holding it are not archived yet (archive_command): they leave pg_wal once archived"
        elif isinstance(start, int) and start < n < now:
            why[name] = (
                "found in WAL written after the maintenance's last pass began: a later write put these bytes there "
                "again (a live row holding the same value), not this erasure's old records"
            )
    if len(why) == len(nums):  # a pass cannot help with any of them
        return "; ".join(sorted(set(why.values()))) + "; no new pass is owed"
    last = _json(conn, schema, RETAKEN).get(epoch)
    if last is not None and last.get("find") == names and now <= int(last.get("end", -1)):
        return (
            "a pass over the WAL owed to this erasure already ran, and the same segments still hold it: "
            "no new pass is owed until new WAL is written past them"
        )
    with conn.transaction():
        _lock_owed(conn, schema)
        owing = _json(conn, schema, OWED)
        owing[epoch] = {"find": names}
        _put(conn, schema, OWED, owing)
    return "a new pass over the WAL is owed to the maintenance"


def _json_note(conn: psycopg.Connection, schema: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (NOTE,)).fetchone()
    try:
        v = json.loads(row[0]) if row else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def owed(conn: psycopg.Connection, schema: str) -> list[int]:
    """The epochs :func:`owe` recorded, oldest first (empty: no pass is owed)."""
    return sorted(_json(conn, schema, OWED))


def owes(conn: psycopg.Connection, schema: str) -> bool:
    """Whether a pass is owed that the compactor should run now (not one a run without the
    rights could not run: the next run with them does)."""
    return any(not e.get("blocked") for e in _json(conn, schema, OWED).values())


def erased(conn: psycopg.Connection, schema: str, key: str, epoch: int | None) -> int:
    """The epoch the last finished maintenance covered (meta ``key``), as the erasure at ``epoch``
    sees it: below it while a pass is owed to that erasure; None: for every erasure at once."""
    row = conn.execute(
        f"SELECT max(v) FILTER (WHERE k = %s), max(v) FILTER (WHERE k = %s) FROM {schema}.meta WHERE k = ANY(%s)",
        (key, OWED, [key, OWED]),
    ).fetchone()
    done = int(row[0] or 0) if row else 0
    if epoch is None or row is None or row[1] is None:
        return done
    return min(done, epoch - 1) if epoch in _json(conn, schema, OWED) else done


def progress(conn: psycopg.Connection, schema: str) -> str | None:
    """What a pass under way has done and has left, in words (None: none is under way)."""
    p = load(conn, schema)
    if p is None:
        return None
    what = "segments from before it to pass" if p.mode == "files" else "rounds to go"
    return (
        f"the maintenance rewrote the tables for epoch {p.epoch} and is switching the WAL past its retention "
        f"({p.rounds} rounds done, {p.remaining()} of {p.noted} {what}; the compactor's next rounds go on)"
    )


def _slots(conn: psycopg.Connection, segsize: int) -> list[tuple[str, bool, int]]:
    """The replication slots that keep WAL: (name, active, first segment kept)."""
    rows = conn.execute(
        "SELECT slot_name, active, (restart_lsn - '0/0'::pg_lsn)::numeric FROM pg_replication_slots"
        " WHERE restart_lsn IS NOT NULL AND coalesce(wal_status, '') <> 'lost'"
    ).fetchall()
    return [(str(r[0]), bool(r[1]), int(r[2]) // segsize) for r in rows]


def _held(conn: psycopg.Connection, p: Pass, kept: list[int], segsize: int, active_too: bool) -> str | None:
    """Why segments from before the pass (numbers ``kept``) stay, where a slot holds them (an
    inactive one always; an active one only with ``active_too``); None: no slot does."""
    if not kept:
        return None
    for name, active, first in _slots(conn, segsize):
        if (active and not active_too) or first > max(kept):
            continue
        return (
            f"the WAL holds segments from before the erasure's maintenance that replication slot {name!r} "
            f"({'active' if active else 'inactive'}) keeps: they leave pg_wal once the slot advances past them "
            "or is dropped, and the next erasure's maintenance switches past them"
        )
    return None


def go_on(
    conn: psycopg.Connection,
    schema: str,
    data_dir: str | None,
    p: Pass,
    report: dict[str, Any],
    budget_s: float,
    t0: float,
) -> bool:
    """A slice of the pass ``p`` (:func:`run`), noted in the maintenance's ``report`` (its run
    began at ``t0``, ``time.monotonic``). True: the pass ended (why early, if it did, among
    ``report["lacking"]``); False: it goes on, its progress saved in meta."""
    ended = run(conn, schema, data_dir, p, budget_s)
    report["wal_rounds"] = p.rounds
    report["wal_slices"] = report.get("wal_slices", 0) + 1
    if ended is None:
        report["seconds"] = round(report.get("seconds", 0) + time.monotonic() - t0, 3)
        p.report = report
        with conn.transaction():
            save(conn, schema, p)
        return False
    report["wal"] = {"noted": p.noted, "rounds": p.rounds, "left": p.remaining(), "start": p.start}
    if ended:
        report["lacking"].append(ended)
        report["wal_held"] = ended  # a retake's new pass supersedes it (:func:`kept`)
    return True


def kept(noted: dict[str, Any], passing: bool) -> list[str]:
    """What the last run's note (``noted``) said it could not do that a retake run (no rewrite,
    only a pass over the WAL) still cannot: all of it, but for the last pass's early end when
    this run makes a new pass (``passing``)."""
    held = noted.get("wal_held") if passing else None
    return [x for x in noted.get("lacking", []) if isinstance(x, str) and x != held]


def run(conn: psycopg.Connection, schema: str, data_dir: str | None, p: Pass, budget_s: float = SLICE_S) -> str | None:
    """Rounds of the pass ``p`` (updated in place) for up to ``budget_s`` seconds. Returns
    None while segments are left (the pass goes on later); ``""`` when it is done; else why
    it ended without passing every segment (the maintenance's note then says so)."""
    segsize = _segsize(conn)
    keep = math.ceil(_setting_bytes(conn, "wal_keep_size") / segsize)
    deadline, here = time.monotonic() + budget_s, 0
    if p.mode == "files" and data_dir is None:  # begun by a process that reads pg_wal: count instead
        fresh = begin(conn, None, p.epoch, p.report)
        p.mode, p.left, p.noted, p.dirty = "count", fresh.left, fresh.noted, []
    while True:
        if p.mode == "files":
            assert data_dir is not None
            files = _passed(conn, p, data_dir, segsize)
            if not p.dirty:
                return ""
            now = _insert_segment(conn, segsize)
            ahead = [ino for ino in p.dirty if files[ino][0] >= now]
            kept = [files[ino][0] for ino in p.dirty if files[ino][0] < now]
            stalled = not ahead and p.stalled > keep + STALL_SLACK
            why = _held(conn, p, kept, segsize, active_too=stalled)
            if why is not None:
                return why
            if stalled:
                names = sorted(files[ino][1] for ino in p.dirty)
                status = os.path.join(data_dir, "pg_wal", "archive_status")
                ready = [n for n in names if os.path.exists(os.path.join(status, n + ".ready"))]
                return (
                    f"{len(names)} WAL segments from before the erasure's maintenance stay in pg_wal after "
                    f"{p.rounds} rounds of switch and checkpoint"
                    + (f", {len(ready)} of them not archived yet (archive_command)" if ready else "")
                    + ": the next erasure's maintenance switches past them"
                )
        else:
            if p.left <= 0:
                return ""
            if p.rounds == 0:
                why = _held(conn, p, [p.start], segsize, active_too=False)
                if why is not None:
                    return why
        if time.monotonic() >= deadline and here > 0:
            return None
        conn.execute(
            f"INSERT INTO {schema}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            (TICK, str(p.rounds)),
        )
        conn.execute("SELECT pg_switch_wal()")
        if p.mode == "files":
            assert data_dir is not None
            # before the checkpoint, which renames the segment just switched out of ahead for reuse
            _passed(conn, p, data_dir, segsize)
        conn.execute("CHECKPOINT")
        p.rounds, here, p.stalled = p.rounds + 1, here + 1, p.stalled + 1
        p.left -= 1 if p.mode == "count" else 0


def _passed(conn: psycopg.Connection, p: Pass, data_dir: str, segsize: int) -> dict[int, tuple[int, str]]:
    """Drop from ``p.dirty`` the segments passed now: gone, or bearing a number past the pass's
    first segment and before the one being written (written anew from their first byte and
    switched out of). Returns the files of ``pg_wal``."""
    now = _insert_segment(conn, segsize)
    files = _files(data_dir, segsize)
    before = len(p.dirty)
    p.dirty = [ino for ino in p.dirty if ino in files and not p.start < files[ino][0] < now]
    p.stalled = 0 if len(p.dirty) < before else p.stalled
    return files


def _setting_bytes(conn: psycopg.Connection, name: str) -> int:
    row = conn.execute("SELECT pg_size_bytes(current_setting(%s))", (name,)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
