"""The read side of the store, below its facade: the purpose check every read makes, the
point read and the listing read, the ``Memory`` a read returns, the quarantine listing, and
recall's read-your-writes.

Nothing here takes the store's lock: each read runs on its own origin snapshot, and every
candidate any path offers is resolved against the origin's live claims before text leaves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from . import validate as v
from .capable import capable
from .errors import InvalidInput, UnknownPurpose
from .model import Claim, Memory, QuarantineItem
from .origin.base import Origin
from .origin.capabilities import KnownPurposes
from .paths.base import ReadPath, Seeing


def known_purpose(origin: Origin, tenant: str, purpose: str) -> None:
    """Refuse a purpose the tenant has never written under (a misspelt purpose would
    otherwise read as an empty store)."""
    if capable(origin, KnownPurposes) and cast(KnownPurposes, origin).knows_purpose(tenant, purpose):
        return
    known = origin.purposes(tenant)
    if purpose not in known:
        listing = ", ".join(known) if known else "none yet"
        raise UnknownPurpose(
            # Neither the tenant nor the purpose is echoed (errors never repeat input).
            f"this tenant has no record written under that purpose (known purposes: {listing}); check the spelling"
        )


def memory(rec: Any, claims: Iterable[Any], tenant: str) -> Memory:
    """The ``Memory`` for a record and its live claims, as the origin's snapshot read them."""
    return Memory(
        key=rec.key,
        text=rec.text,
        tenant=tenant,  # the origin keeps the tenant's id, not its name
        metadata=json.loads(rec.metadata),
        sources=tuple(json.loads(rec.sources)),
        claims=tuple(Claim(c.subject, c.purpose, c.basis, c.expires_at) for c in claims),
        updated_at=rec.updated_at,
    )


def read(origin: Origin, tenant: str, name: str, key: str, purpose: str, now: float) -> Memory | None:
    """The record under ``key`` of tenant id ``tenant`` (named ``name``) with a live claim for
    ``purpose`` at ``now``, on one snapshot; else None."""
    with origin.snapshot() as r:
        known_purpose(origin, tenant, purpose)
        found = r.read(tenant, key, purpose, now)
    return None if found is None else memory(*found, name)


def listing(prefix: Any, subject: Any, after: Any, limit: Any) -> tuple[str, str | None, str | None, int]:
    """A listing read's checked ``(prefix, subject, after, limit)``."""
    limit = v.whole(limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput("limit must be an int from 1 to 1000; page on with after=")
    return (
        "" if prefix is None or prefix == "" else v.key(prefix, "prefix"),  # "": every key, as None
        None if subject is None else v.name(subject, "subject"),
        None if after is None else v.key(after, "after"),
        limit,
    )


def scan(
    origin: Origin, tenant: str, name: str, purpose: str, listing: tuple[str, str | None, str | None, int], now: float
) -> list[Memory]:
    """The listing read (``Store.scan``) on one snapshot: records with a live claim for
    ``purpose`` (and the subject) whose key starts with the prefix, in key order."""
    prefix, subject, after, limit = listing
    with origin.snapshot() as r:
        known_purpose(origin, tenant, purpose)
        keys = r.scan_keys(tenant, purpose, prefix, subject, after, limit, now)
        found = [r.read(tenant, key, purpose, now) for key in keys]
    return [memory(*f, name) for f in found if f is not None]


def quarantined(origin: Origin, tenant: str) -> list[QuarantineItem]:
    """The tenant's quarantined records, each with the sources that are still live."""
    with origin.snapshot() as r:
        rows = r.quarantined(tenant)
        all_sources = sorted({s for row in rows for s in json.loads(row[5])})
        live = r.live_keys(tenant, all_sources)
    return [
        QuarantineItem(
            key=key,
            why=why,
            handle=handle,
            since=since,
            sources=tuple(json.loads(src)),
            surviving_sources=tuple(s for s in json.loads(src) if s in live),
        )
        for _rid, key, why, handle, since, src in rows
    ]


def absorb_new_content(origin: Origin, paths: Sequence[ReadPath], background: Callable[[], bool]) -> None:
    """Read-your-writes for recall: bring asynchronous paths up to the newest write.
    Erasures committed after that write stay for the compactor: they are unreadable
    already, and absorbing them is not needed for a correct answer. ``background()`` says
    whether the compactor's thread is running."""
    for p in paths:
        if p.synchronous:
            continue
        if capable(p, Seeing) and background():
            # The compactor absorbs in the background; what it has not yet is searched
            # exactly, so no recall waits for a big import's absorption.
            seeing = cast(Seeing, p)
            seeing.see(origin.latest_put_epoch(after=seeing.seen_epoch()))
            continue
        target = origin.latest_put_epoch(after=p.applied_epoch())
        if target is not None:
            p.catch_up(upto=target)
