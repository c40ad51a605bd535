"""The write side of the store, as transaction bodies for its chokepoint
(:meth:`efface.store.Store._mutate`): records (``write``, ``write_many``), a second claim
on one (``retain``), the identifiers that name a subject (``register_subject``).

``Store`` checks the caller's arguments and turns the tenant's name into its id; these take
the checked values and the store's collaborators. Each body runs inside the origin
transaction and returns ``(result, puts, drops, texts)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from . import validate as v
from .derivations import Derivations
from .derivations.identifiers import check_identifiers
from .embed import Embedder
from .erasure.release import Releaser, overwritten_claims
from .errors import InvalidInput, NotFound
from .model import Selector
from .origin.base import NewRecord
from .vectors import stored as stored_vectors

Body = Callable[[Any, float], tuple[Any, list[int], list[int], dict[int, str]]]
SubjectHash = Callable[[str], str]
"""A subject's keyed hash within one tenant (what its data key is filed under)."""


def vectors(embedder: Embedder, prepared: Sequence[tuple], embeddings: Any) -> list[bytes]:
    """One stored vector per item (:mod:`efface.vectors`): the embedder's, or the caller's
    precomputed ones once their shape and values are checked."""
    if embeddings is None:
        got = embedder.embed([p[1] for p in prepared])
    else:
        try:
            with np.errstate(over="ignore"):  # past float32's range: refused below, as not finite
                got = np.asarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"embeddings must be numbers, shape ({len(prepared)}, {embedder.dim})") from exc
        if got.shape != (len(prepared), embedder.dim):
            raise InvalidInput(f"embeddings must have shape ({len(prepared)}, {embedder.dim})")
        with np.errstate(over="ignore", invalid="ignore"):
            finite = bool(np.isfinite(got).all())
        if not finite:
            raise InvalidInput("embeddings must be finite numbers (no NaN or infinity): nothing was written")
    return stored_vectors(got)


def records_body(
    releaser: Releaser,
    derivations: Derivations,
    subject_h: SubjectHash,
    tenant: str,
    name: str,
    prepared: Sequence[tuple],
    vecs: Sequence[bytes],
    replace: bool,
) -> Body:
    """Upsert the checked items (``validate.items``) with their claims. Content another
    subject holds a claim on is refused (``KeyInUse``) unless ``replace``: then it is erased
    first, as an erasure of its own (the body's result is its ``Outcome``, else None)."""

    def body(tx, now):
        tx.set_tenant_name(tenant, name)
        puts, drops, texts = [], [], {}
        outcome = None
        known = tx.record_ids(tenant, [p[0] for p in prepared])  # once, for both uses below
        in_the_way = overwritten_claims(tx, tenant, prepared, replace, known)
        if in_the_way:
            # The replaced content goes with every claim made for it, as an erasure of its own.
            writers = frozenset(p[2] for p in prepared)  # their new claims keep their registrations
            outcome = releaser.release(tx, Selector(tenant), "replace", in_the_way, now, staying=writers)
            puts, drops, texts = list(outcome.puts), list(outcome.drops), dict(outcome.texts)
        recs = [
            NewRecord(key, text, meta, srcs, vec, subj, purp, bas, None if ttl_s is None else now + ttl_s)
            for (key, text, subj, purp, bas, ttl_s, meta, srcs), vec in zip(prepared, vecs, strict=True)
        ]
        rids = tx.upsert_many(tenant, recs, now, known)  # one statement per table for the batch
        for purp in dict.fromkeys(p[3] for p in prepared):
            tx.register_purpose(tenant, purp)
        for rid, rec in zip(rids, recs, strict=True):
            derivations.on_write(tx, tenant, rid, rec.text)
            puts.append(rid)
            texts[rid] = rec.text
        tx.ensure_subject_keys(tenant, {p[2] for p in prepared}, now, subject_h)
        return outcome, puts, drops, texts

    return body


def claim_body(
    subject_h: SubjectHash,
    tenant: str,
    name: str,
    key: str,
    claim: tuple[str, str, str, float | None],
) -> Body:
    """Add ``claim`` (subject, purpose, basis, ttl in seconds) to the live record ``key``."""
    subject, purpose, basis, ttl_s = claim

    def body(tx, now):
        tx.set_tenant_name(tenant, name)
        rid = tx.record_id(tenant, key)
        if rid is None:
            raise NotFound("no live record with that key in this tenant: write it before retaining it")
        tx.add_claim(rid, subject, purpose, basis, None if ttl_s is None else now + ttl_s, now)
        tx.register_purpose(tenant, purpose)
        tx.ensure_subject_keys(tenant, [subject], now, subject_h)
        return None, [], [], {}

    return body


def identifiers(given: Any) -> list[str]:
    """The identifiers a subject is registered with, each checked (``CommonIdentifier`` for
    one too common to name a person), sorted and without repeats."""
    if isinstance(given, str):
        raise InvalidInput("identifiers must be a list of strings, not one string")
    if not isinstance(given, Iterable):
        raise InvalidInput("identifiers must be a list of strings")
    names: list[str] = []
    for i in given:
        if len(names) == v.MAX_IDENTIFIERS:
            raise InvalidInput(
                f"a subject may be registered with at most {v.MAX_IDENTIFIERS} identifiers: "
                "register its names, e-mails and phones, not a list of every word"
            )
        names.append(v.name(i, "each identifier"))
    check_identifiers(names)
    return sorted(set(names))


def subject_body(derivations: Derivations, tenant: str, name: str, subject: str, ids: list[str]) -> Body:
    """Register ``subject``'s identifiers and find the records that name it."""

    def body(tx, now):
        tx.set_tenant_name(tenant, name)
        tx.set_subject(tenant, subject, json.dumps(ids, ensure_ascii=False), now)
        derivations.on_register(tx, tenant, subject, ids)
        return None, [], [], {}

    return body
