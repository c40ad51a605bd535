"""Restoring a backup: replay the erasure ledger first, so nothing erased since comes back.

The whole file is authenticated and decrypted before anything is written; a failure restores
nothing. Records already live are left as they are. A record whose subjects' keys were
destroyed cannot be decrypted at all (crypto-shredded); one erased, released or expired
after the backup is skipped by the replay.
"""

from __future__ import annotations

import json
import os

from ..errors import BackupMismatch, NotFound, UnverifiableDeletion
from ..origin.base import NewRecord
from ..origin.ledger import verify_chain
from . import format as fmt
from .context import BackupContext


def _replay(entries: list[dict], seq: int) -> tuple[set[str], set[tuple]]:
    """Key hashes erased (or held back) and claims released by the ledger after entry ``seq``."""
    erased: set[str] = set()
    released: set[tuple] = set()
    for e in entries[seq:]:
        if e["kind"] in ("forget", "expire", "replace"):
            b = json.loads(e["body"])
            erased.update(b["erased"])
            # Records held back or redacted because of a later erasure: the backup has the
            # version from before it, which must not come back.
            erased.update(d["key_h"] for d in b["derivations"] if d["action"] != "kept")
            released.update((r["key_h"], r["subject_h"], r["purpose"], r["basis"]) for r in b["released"])
    return erased, released


def restore_backup(ctx: BackupContext, src: str | os.PathLike) -> fmt.RestoreResult:
    from ..validate import file_path

    src = file_path(src, "the backup to restore")
    if not os.path.isfile(src):
        raise NotFound("no backup file at that path")
    header = fmt.read_header(src)
    h = ctx.hasher
    if header.get("store_id") != h("store", "id"):
        raise BackupMismatch(
            "this backup was made by another efface store; only the store that made it holds its keys: restore it there"
        )
    fmt.verify_file(src, ctx.secret("backup-mac"))
    ctx.expire_due()
    entries = ctx.origin.ledger()
    if not verify_chain(entries).ok:
        raise UnverifiableDeletion(
            "the erasure ledger does not verify, so a restore could bring back "
            "erased records; nothing was restored (run `efface ledger verify`)"
        )
    seq = header["ledger_seq"]
    mark = entries[seq - 1] if 0 < seq <= len(entries) else None
    if mark is None or mark["hash"] != header["ledger_hash"] or mark["kind"] != "backup":
        raise BackupMismatch("this store's ledger has no record of this backup; nothing was restored")
    erased, released = _replay(entries, seq)
    keys = {kid: key for _t, _s, kid, key in ctx.origin.subject_keys()}
    keys[fmt.STORE_KID] = ctx.secret("backup-settings")
    ids = {"store_id": header["store_id"], "backup_id": header["backup_id"]}
    n_subjects = header["counts"]["identifiers"]
    plan: dict[str, dict] = {}
    shredded = 0

    def tenant_plan(t: str) -> dict:
        return plan.setdefault(t, {"policies": [], "purposes": [], "subjects": [], "records": []})

    # Decrypt and authenticate everything before writing anything.
    for index, frame in enumerate(fmt.frames(src)):
        opened = fmt.open_frame(frame, keys, **ids, index=index)
        if opened is None:
            shredded += index > n_subjects  # settings and subjects are not records
            continue
        payload, wraps = opened
        if index == 0:
            settings = json.loads(payload)
            for t, policy, reason in settings["policies"]:
                tenant_plan(t)["policies"].append((policy, reason))
            for t, purpose in settings["purposes"]:
                tenant_plan(t)["purposes"].append(purpose)
        elif index <= n_subjects:
            s = json.loads(payload)
            tenant_plan(s["tenant"])["subjects"].append((s["subject"], s["identifiers"], wraps[0][0]))
            if s.get("tenant_name"):
                tenant_plan(s["tenant"])["name"] = s["tenant_name"]
        else:
            fields, emb = fmt.decode_record(payload)
            claims = [(kid, c) for kid, extra in wraps for c in json.loads(extra)]
            tenant_plan(fields["tenant"])["records"].append((fields, emb, claims))
            if fields.get("tenant_name"):
                tenant_plan(fields["tenant"])["name"] = fields["tenant_name"]

    totals = {"restored": 0, "shredded": shredded, "replayed": 0, "present": 0, "subjects": 0}
    last_epoch = 0
    mentions = ctx.derivations.mentions
    for tenant in sorted(plan):
        p = plan[tenant]
        installed: list[str] = []

        def body(tx, now, tenant=tenant, p=p, installed=installed):
            alive = {kid for _t, _s, kid, _k in tx.subject_keys()}
            n = dict.fromkeys(("restored", "shredded", "replayed", "present", "subjects"), 0)
            for purpose in p["purposes"]:
                tx.register_purpose(tenant, purpose)
            for policy, reason in p["policies"]:
                if not tx.has_policy(tenant):
                    tx.set_policy(tenant, policy, reason)
            for subject, idents, kid in p["subjects"]:
                if kid in alive and tx.subject_identifiers(tenant, subject) is None:
                    if p.get("name"):
                        tx.set_tenant_name(tenant, p["name"])
                    tx.set_subject(tenant, subject, idents, now)
                    names = json.loads(idents)
                    ctx.derivations.on_register(tx, tenant, subject, names)
                    # Restored records below must be checked for this subject's names too.
                    mentions.set_subject(tenant, subject, names)
                    installed.append(subject)
                    n["subjects"] += 1
            puts, texts = [], {}
            for fields, emb, claims in p["records"]:
                key = fields["key"]
                key_h = h("key", tenant, key)
                if key_h in erased:
                    n["replayed"] += 1
                    continue
                live = [c for kid, c in claims if kid in alive]
                if not live:  # its subjects' keys went since the decryption above
                    n["shredded"] += 1
                    continue
                live = [
                    c
                    for c in live
                    if (key_h, h("subject", tenant, c[0]), c[1], c[2]) not in released and (c[3] is None or c[3] > now)
                ]
                if not live:
                    n["replayed"] += 1
                    continue
                if tx.record_id(tenant, key) is not None:
                    n["present"] += 1
                    continue
                if p.get("name"):
                    tx.set_tenant_name(tenant, p["name"])
                s0, p0, b0, e0 = live[0]
                rid = tx.upsert(
                    tenant,
                    NewRecord(
                        key,
                        fields["text"],
                        fields["metadata"],
                        tuple(json.loads(fields["sources"])),
                        emb,
                        s0,
                        p0,
                        b0,
                        e0,
                    ),
                    now,
                )
                for s, purpose, basis, expires_at in live[1:]:
                    tx.add_claim(rid, s, purpose, basis, expires_at, now)
                for purpose in {c[1] for c in live}:
                    tx.register_purpose(tenant, purpose)
                tx.set_times(rid, fields["created_at"], fields["updated_at"])
                if fields["quarantine"] is not None:
                    why, handle, since = fields["quarantine"]
                    tx.quarantine(rid, tenant, why, handle, since)
                ctx.derivations.on_write(tx, tenant, rid, fields["text"])
                puts.append(rid)
                texts[rid] = fields["text"]
                n["restored"] += 1
            tx.append_ledger("restore", None, {"tenant_h": tenant, "backup_id": header["backup_id"], **n}, now)
            return n, puts, [], texts

        try:
            last_epoch, n = ctx.mutate("restore", tenant, body)
        except BaseException:
            for subject in installed:
                mentions.drop_subject(tenant, subject)
            raise
        for name, value in n.items():
            totals[name] += value
    return fmt.RestoreResult(backup_id=header["backup_id"], epoch=last_epoch, **totals)
