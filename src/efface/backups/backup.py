"""Writing a backup: every live record sealed under the data keys of the subjects holding it.

Each record is encrypted with its own key, wrapped under the key of every subject holding a
claim on it; those per-subject keys live only in the origin and are destroyed in the
transaction that removes the subject's last claim (crypto-shredding). The backup runs inside
one origin transaction through the store's chokepoint, so its ledger entry and the snapshot
it writes agree: every erasure committed after it is replayed by a restore. Writes wait for
it; reads do not (they run on their own snapshots).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile

from .. import foreground
from ..dirs import fsync_dir
from . import format as fmt
from .context import BackupContext

YIELD_EVERY = 64
"""Records sealed between two yields of the GIL (reads run beside a backup)."""


EXISTS = (
    "the backup destination exists already: choose another file, or pass overwrite=True "
    "(efface backup --overwrite) to replace it"
)


def write_backup(ctx: BackupContext, dest: str | os.PathLike, *, overwrite: bool = False) -> fmt.BackupResult:
    from ..errors import InvalidInput
    from ..validate import file_path

    dest = file_path(dest, "the backup destination")
    if not isinstance(overwrite, bool):
        raise InvalidInput("overwrite must be True or False")
    parent, base = os.path.dirname(dest), os.path.basename(dest)
    if os.path.isdir(dest):
        raise InvalidInput("the backup destination is a directory: give a file path")
    if not os.path.isdir(parent):
        raise InvalidInput("the backup destination's directory does not exist: create it first")
    if not overwrite and os.path.lexists(dest):
        raise InvalidInput(EXISTS)
    h = ctx.hasher
    store_id = h("store", "id")
    mac_key, settings_key = ctx.secret("backup-mac"), ctx.secret("backup-settings")
    backup_id = "efb_" + secrets.token_hex(12)
    path_h = h("backup-path", dest)
    # Temporary files of an earlier backup to the same path killed mid-way (ciphertext only).
    for name in os.listdir(parent):
        if name.startswith(f".{base}.") and name.endswith(".efface-tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(parent, name))
    tmp: list[str] = []
    placed: list[str] = []
    committed: list[bool] = []

    def body(tx, now):
        # Subjects of stores made before keys existed get theirs now.
        pairs: dict[str, set[str]] = {}
        for t, s in tx.claim_subjects(now):
            pairs.setdefault(t, set()).add(s)
        for t, named in pairs.items():
            tx.ensure_subject_keys(t, named, now, lambda s, t=t: h("subject", t, s))
        seq, ledger_hash = tx.append_ledger(
            "backup", None, {"backup_id": backup_id, "epoch": tx.epoch, "path_h": path_h}, now
        )
        keys = {(t, s): (kid, key) for t, s, kid, key in tx.subject_keys()}
        # Tenant names travel only inside frames sealed with subject keys, so they are
        # crypto-shredded with the tenant's last subject (the settings frame has ids only).
        names: dict[str, str | None] = {}

        def name_of(t: str) -> str | None:
            if t not in names:
                names[t] = ctx.origin.tenant_name(t)
            return names[t]

        subjects = [r for r in tx.all_subjects() if (r[0], r[1]) in keys]
        header = {
            "format": fmt.FORMAT,
            "store_id": store_id,
            "backup_id": backup_id,
            "epoch": tx.epoch,
            "ledger_seq": seq,
            "ledger_hash": ledger_hash,
            "created_at": now,
            "embedder": ctx.embedder_name,
            "counts": {"records": tx.count_live_records(now), "identifiers": len(subjects), "keys": len(keys)},
        }
        fd, path = tempfile.mkstemp(prefix=f".{base}.", suffix=".efface-tmp", dir=parent)
        tmp.append(path)
        ids = {"store_id": store_id, "backup_id": backup_id}
        with os.fdopen(fd, "wb") as f:
            w = fmt.BackupWriter(f, mac_key, header)
            settings = {"t": "settings", "policies": tx.all_policies(), "purposes": tx.all_purposes()}
            w.frame(fmt.seal(json.dumps(settings).encode(), [(fmt.STORE_KID, settings_key, b"")], index=0, **ids))
            index = 1
            for t, s, idents in subjects:
                kid, key = keys[t, s]
                payload = json.dumps(
                    {"t": "subject", "tenant": t, "tenant_name": name_of(t), "subject": s, "identifiers": idents},
                    ensure_ascii=False,
                ).encode()
                w.frame(fmt.seal(payload, [(kid, key, b"")], index=index, **ids))
                index += 1
            written = 0
            for row, claims in tx.backup_rows(now):
                if written % YIELD_EVERY == 0:
                    foreground.give_way()  # a long Python loop: recalls first
                _rid, t, key_, text, meta, srcs, emb, created, updated, qwhy, qhandle, qsince = row
                by_subject: dict[str, list] = {}
                for s, purpose, basis, expires_at in claims:
                    by_subject.setdefault(s, []).append([s, purpose, basis, expires_at])
                wraps = [
                    (*keys[t, s], json.dumps(cs, ensure_ascii=False).encode()) for s, cs in sorted(by_subject.items())
                ]
                fields = {
                    "t": "record",
                    "tenant": t,
                    "tenant_name": name_of(t),
                    "key": key_,
                    "text": text,
                    "metadata": meta,
                    "sources": srcs,
                    "created_at": created,
                    "updated_at": updated,
                    "quarantine": None if qwhy is None else [qwhy, qhandle, qsince],
                }
                w.frame(fmt.seal(fmt.encode_record(fields, emb), wraps, index=index, **ids))
                index += 1
                written += 1
            size = w.finish()
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the backup
        tx.record_backup(backup_id, path_h, seq, now, written, len(keys))
        if not overwrite:
            # The name is claimed before the commit: a file that took it meanwhile refuses
            # the backup here, which rolls back its ledger entry (the ledger names only
            # backups that were written).
            _place_new(tmp[0], dest)
            placed.append(dest)
        return fmt.BackupResult(dest, backup_id, tx.epoch, seq, written, len(keys), size), [], [], {}

    def after(_result):
        committed.append(True)
        if overwrite:
            os.replace(tmp[0], dest)
        fsync_dir(parent)

    try:
        _epoch, result = ctx.mutate("backup", None, body, after=after)
    except BaseException:
        for path in tmp:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if not committed:  # a file this backup placed, whose ledger entry did not commit
            for path in placed:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        raise
    return result


def _place_new(tmp: str, dest: str) -> None:
    """Give the finished file ``tmp`` the name ``dest`` unless a file of that name appeared
    meanwhile (a hard link fails then, where a rename would replace it); a file system
    without hard links gets the rename after a last look."""
    from ..errors import InvalidInput

    try:
        os.link(tmp, dest)
    except FileExistsError:
        raise InvalidInput(EXISTS) from None
    except OSError:
        if os.path.lexists(dest):
            raise InvalidInput(EXISTS) from None
        os.replace(tmp, dest)
        return
    os.unlink(tmp)
