"""Property test: a real embedded store and the reference model, driven by the same random
operations, must agree on everything a caller can observe.

Hypothesis picks writes, batch writes, retains, reads, recalls, forgets with every selector
combination, clock advances (TTL expiry), sweeps, compactions (which absorb the ANN index's
pending erasures) and close-and-reopen cycles, over two tenants, three subjects, three
purposes (``audit`` is kept under ``legal_hold``/``legal_obligation``) and a small key space
whose keys share prefixes. After every step:

* every (tenant, key, purpose) the model says is live reads back with the model's text and
  claims; every other one reads None (or UnknownPurpose, in both);
* recall, queried with every word in use (and with the texts of the latest erased
  records), returns every live record, proposed by both the full-text and the vector index,
  and never a key the model says is not live for that tenant and purpose, nor any text but
  the model's current text for the key: so no erased or expired content leaks through the
  ANN index while it lags, nor through the full-text index;
* forget receipts match the model: ``erased`` is exactly the set of keys the model erased,
  ``released`` and ``retained`` the claims it released and kept;
* after a reopen every earlier receipt is still found by ``status()`` with the same counts,
  and the hash-chained ledger verifies and holds one entry per receipt;
* identifiers go with the last claim (docs/concepts.md §8): subjects are registered with distinctive
  identifiers, and forgets by key, prefix and purpose aimed at a subject's last claim, and
  expiries of it, must erase them (``subjects_erased`` matches the model); after every
  wait and verify a raw byte scan of every file of the store directory must agree with
  ``verify``: never ``erased`` while an erased text's or identifier's bytes remain (unless
  a live record or registration holds the same bytes).

Hostile identifiers (issue #12): subjects register names in Unicode forms (soft hyphen,
zero-width characters, word joiner, byte-order mark, variation selector, full width, upper
case), records name them in other forms, before or after the registration; a forget by
subject holds back exactly the records that name the subject, and never another. Writes
over another subject's claims are refused (``KeyInUse``) or, with ``replace=True``, erase
the old record with a ``replace`` receipt that ``verify`` checks like any other, bytes too.

Origins (the ``backend`` fixture of ``conftest.py``): every machine runs on SQLite, the memory
origin (not the background one: nothing of it persists) and PostgreSQL, where each example gets
a fresh database and fewer, shorter examples run (:data:`PG_PROFILES`: 4 of 30 steps by default,
6 of 40 with ``slow``), since every read and recall there is a round trip. On PostgreSQL a third
machine, :class:`TwoStoreMachine`, runs two stores on one database, as two efface servers: each
operation goes through either, and both must agree with the model after every step.

The machines are ``slow`` tests (``conftest.py``): a default run (CI's) runs 25 examples of 50
steps on SQLite and the memory origin (the background machine a third of them, at least 10);
``EFFACE_SLOW=1`` (or ``HYPOTHESIS_PROFILE=slow``, formerly ``ci``) runs 100 of 60.
``HYPOTHESIS_PROFILE=soak`` (with ``HYPOTHESIS_EXAMPLES=N``, default 400) is for local soak
runs with ``--hypothesis-seed``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import efface

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import bounded
from reference_model import ModelKeyInUse, ModelNotFound, ModelUnknownPurpose, Outcome, ReferenceModel

pytestmark = pytest.mark.slow  # CI runs fewer examples than EFFACE_SLOW=1 (PROFILES)

TENANTS = ("acme", "globex")
SUBJECTS = ("alice", "bob", "carol")
PURPOSES = ("support", "analytics", "audit")
KEYS = ("a", "a1", "a12", "a2", "b", "b1")
PREFIXES = ("a", "a1", "b", "c")
WORDS = (
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "meadow",
    "nectar",
)
IDENTIFIERS = {
    "alice": ("Alyssa Quillfeather", "alyssa.quill@quillmail.example", "+44 20 7946 0321"),
    "bob": ("Bartholomew Ostrander", "b.ostrander@ostmail.example"),
    "carol": ("Carolina Vantongeren", "cvantongeren@vantmail.example", "+1 415 555 0142"),
}
"""Distinctive identifiers (none is a word of the texts, so nothing mentions them), long
enough to be fingerprinted and byte-scanned."""
NAMES = {"alice": "Quorra Vell", "bob": "Ansel Drummond", "carol": "Zephyrine Osk"}
"""The name each subject registers; never one of :data:`WORDS`."""
FORMS = {
    "plain": lambda n: n,
    "upper": str.upper,
    "soft-hyphen": lambda n: n[:3] + "\u00ad" + n[3:],
    "zero-width-space": lambda n: n.replace(" ", "\u200b", 1),  # where the space was: a word break
    "zero-width-joiner": lambda n: n.replace(" ", " \u200d", 1),
    "word-joiner": lambda n: n[:-2] + "\u2060" + n[-2:],
    "byte-order-mark": lambda n: "\ufeff" + n,
    "variation-selector": lambda n: n[:1] + "\ufe0f" + n[1:],
    "full-width": lambda n: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in n),
}
forms = st.sampled_from(sorted(FORMS))
K_ALL = 50
"""Larger than any tenant's record count, so recall can return every live record."""

PROFILES = {
    "default": dict(max_examples=25, stateful_step_count=50),
    "slow": dict(max_examples=100, stateful_step_count=60),
    "soak": dict(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "400")), stateful_step_count=60),
}
PROFILES["ci"] = PROFILES["slow"]  # its former name
PROFILE = PROFILES.get(os.environ.get("HYPOTHESIS_PROFILE", bounded("default", "slow")), PROFILES["default"])

tenants = st.sampled_from(TENANTS)
subjects = st.sampled_from(SUBJECTS)
purposes = st.sampled_from(PURPOSES)
keys = st.sampled_from(KEYS)
texts = st.lists(st.sampled_from(WORDS), min_size=2, max_size=4, unique=True).map(" ".join)
ttls = st.one_of(st.none(), st.sampled_from([5, 10, 30, 2.5]))


@st.composite
def claims(draw):
    """A (subject, purpose, basis): ``audit`` is held under a legal basis; the others
    mostly under consent or contract, sometimes under a legal basis too."""
    purpose = draw(purposes)
    if purpose == "audit":
        basis = draw(st.sampled_from(["legal_hold", "legal_obligation"]))
    else:
        basis = draw(st.sampled_from(["consent", "consent", "contract", "contract", "consent", "legal_hold"]))
    return draw(subjects), purpose, basis


@st.composite
def selectors(draw):
    """Any non-empty combination of subject, purpose, prefix and key."""
    while True:
        sel = {
            "subject": draw(st.none() | subjects),
            "purpose": draw(st.none() | purposes),
            "prefix": draw(st.none() | st.sampled_from(PREFIXES)),
            "key": draw(st.none() | keys),
        }
        if any(v is not None for v in sel.values()):
            return sel


@st.composite
def aimed_selectors(draw, key, subject, purpose):
    """A non-empty selector built from one existing claim's coordinates."""
    while True:
        sel = {
            "subject": draw(st.sampled_from([None, subject])),
            "purpose": draw(st.sampled_from([None, purpose])),
            "prefix": draw(st.sampled_from([None, key[:1], key])),
            "key": draw(st.sampled_from([None, key])),
        }
        if any(v is not None for v in sel.values()):
            return sel


def batches(min_size):
    """Items for write_many: distinct keys, each maybe overriding the claim and the ttl."""
    return st.lists(keys, min_size=min_size, max_size=min_size + 3, unique=True).flatmap(
        lambda ks: st.tuples(*[st.tuples(st.just(k), texts, st.none() | claims(), st.none() | ttls) for k in ks])
    )


class FakeClock:
    """The store's clock; only the test moves it."""

    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def released_of(receipt) -> Counter:
    return Counter((r.key, r.subject, r.purpose, r.basis) for r in receipt.released)


def retained_of(receipt) -> Counter:
    return Counter((r.key, r.purpose, r.basis, r.expires_at) for r in receipt.retained)


class StoreMachine(RuleBasedStateMachine):
    ORIGIN = "sqlite"
    """The origin backend this machine drives (see :data:`conftest.BACKENDS`): ``sqlite``,
    ``memory`` or ``postgres`` (then :attr:`PG` is the server, and each example gets a fresh
    database of its own)."""
    PG = None
    """The ``pg`` fixture's server, for ``ORIGIN = "postgres"``."""
    BACKGROUND = False
    """Whether the stores run their background compactor."""
    STORES = 1
    """How many stores the machine opens on its one origin (two: two processes' worth of
    stores on one PostgreSQL database, see :class:`TwoStoreMachine`)."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="efface-sm-")
        self.clock = FakeClock()
        self.model = ReferenceModel()
        self.pg_stores = None
        if self.ORIGIN == "postgres":
            from conftest import PgStores

            self.pg_stores = PgStores(self.PG, Path(self.dir))
        self.stores = [self._open(i) for i in range(self.STORES)]
        self.store = self.stores[0]
        """The store the next operation goes through (:meth:`TwoStoreMachine.switch` moves it)."""
        self.receipts: dict[str, Outcome] = {}
        """handle -> the model's outcome for that receipt (forgets and sweeps)."""
        self.erased: list[tuple[str, str, str]] = []
        """(tenant, key, text) of every record the model erased, newest last."""

    @property
    def persists(self) -> bool:
        """Whether a store can be closed and opened again (not the memory origin)."""
        return self.ORIGIN != "memory"

    @property
    def erased_after_wait(self) -> bool:
        """Whether ``verify`` must say ``erased`` once ``wait`` returned: on the origins whose
        bytes the store scans. On PostgreSQL the ladder says what it checked of the database's
        files (``unreadable``, or ``erased`` where it scanned them), never more."""
        return self.ORIGIN != "postgres"

    def _open(self, i: int = 0):
        where = os.path.join(self.dir, f"store{i}") if self.STORES > 1 else self.dir
        options = dict(embedder="hashing", background=self.BACKGROUND, clock=self.clock)
        if self.pg_stores is not None:
            # every store of the machine is on the same database (one url), each with its own cache directory
            store = efface.open(self.pg_stores.url(self.dir), **options, **self.pg_stores.options(where))
        else:
            store = efface.open(where, **options, origin=self.ORIGIN)
        if self.BACKGROUND:
            # Expiries stay where the model has them (the rules' writes and sweeps): a background
            # round would honour them at moments the model cannot know, on its moved clock.
            store._compactor._expire = lambda: None
        return store

    def _through_each(self) -> Iterator[object]:
        """Each store in turn as :attr:`store` (invariants hold whichever one a caller asks)."""
        current = self.store
        try:
            for store in list(self.stores):
                self.store = store
                yield store
        finally:
            self.store = current

    def _on_disk(self, text: str) -> bool:
        """Whether any file of the store holds ``text``'s bytes (a raw scan)."""
        needle = text.encode()
        return any(needle in blob for blob in self._files())

    def teardown(self):
        try:
            for store in self.stores:
                store.close()
        finally:
            if self.pg_stores is not None:
                self.pg_stores.drop()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------
    def _note_expired(self, outcomes: dict[str, Outcome]) -> None:
        for o in outcomes.values():
            event(f"implicit expiry: erased={bool(o.erased)}")
            self.erased += [(o.tenant, k, t) for k, t in o.erased_texts.items()]

    def _check_receipt(self, receipt, expected: Outcome) -> None:
        assert len(receipt.erased) == len(set(receipt.erased)), "a key is listed as erased twice"
        assert set(receipt.erased) == expected.erased
        assert released_of(receipt) == expected.released
        assert retained_of(receipt) == expected.retained
        assert receipt.kind == expected.kind
        assert receipt.selector.tenant == expected.tenant
        assert receipt.level in ("intent", "unreadable", "erased")
        assert set(receipt.subjects_erased) == expected.subjects_erased
        assert receipt.identifiers_erased == bool(expected.subjects_erased)
        # No lineage here; held back only records naming the forgotten subject's registered name.
        held = set(receipt.quarantined)
        assert held <= expected.mentioning, "a forget held back a record that does not name its subject"
        if expected.exact:
            assert held == expected.mentioning, "a forget missed a record that names its subject"
        self.model.quarantined |= {(expected.tenant, k) for k in held}
        assert receipt.handle and receipt.handle not in self.receipts
        self.receipts[receipt.handle] = expected
        event(f"{expected.kind}: erased={bool(expected.erased)} retained={bool(expected.retained)}")
        self.erased += [(expected.tenant, k, t) for k, t in expected.erased_texts.items()]

    def _check_recall(
        self,
        query: str,
        tenant: str,
        purpose: str,
        subject: str | None = None,
        k: int = K_ALL,
        ann_complete: bool = False,
    ) -> list:
        now = self.clock.t
        try:
            self.model.check_purpose(tenant, purpose)
        except ModelUnknownPurpose:
            with pytest.raises(efface.UnknownPurpose):
                self.store.recall(query, tenant=tenant, purpose=purpose, subject=subject, k=k)
            return []
        hits = self.store.recall(query, tenant=tenant, purpose=purpose, subject=subject, k=k)
        visible = self.model.visible(tenant, purpose, now, subject)
        keys_seen = [h.key for h in hits]
        assert len(keys_seen) == len(set(keys_seen)), "recall returned a key twice"
        assert len(hits) <= k
        for h in hits:
            assert h.key in visible, (
                f"recall returned {h.key!r} in {tenant}/{purpose}, which the model says is not live"
                f" (model text: {self.model.text(tenant, h.key)!r}, hit text: {h.text!r})"
            )
            assert h.text == visible[h.key], f"recall served stale text for {h.key!r}"
        # Full-text search ORs the query's words: when k leaves room for every live record,
        # each one sharing a word with the query must come back.
        if k >= len(visible):
            words = set(query.split())
            via = {h.key: h.via for h in hits}
            for key, text in visible.items():
                if words & set(text.split()):
                    assert key in keys_seen, f"recall missed live record {key!r} that shares a word with the query"
                    # and the word index proposed it (a store whose word index lags another
                    # process's writes would be covered by the vector leg alone)
                    assert "fts" in via[key], f"the word index does not hold live record {key!r} ({text!r})"
        if ann_complete:
            # A tenant's vector index holds a handful of vectors here and recall asks it for
            # 200, so it proposes every live record: one missing means the index lost a write.
            via = {h.key: h.via for h in hits}
            for key in visible:
                assert "ann" in via.get(key, ()), f"the vector index does not hold live record {key!r}"
        return hits

    # -- rules -----------------------------------------------------------------------
    @rule(tenant=tenants, key=keys, text=texts, claim=claims(), ttl=ttls)
    def write(self, tenant, key, text, claim, ttl):
        subject, purpose, basis = claim
        self._write(tenant, [dict(key=key, text=text, subject=subject, purpose=purpose, basis=basis, ttl=ttl)])

    def _write(self, tenant, items, replace=False, batch=None, **defaults):
        """Write ``items`` (the model's full items) through ``write`` (one item) or
        ``write_many`` (``batch``, with the call's ``defaults``); a write over another
        subject's claims must be refused in both, or replace in both."""
        try:
            expired = self.model.write_many(tenant, items, now=self.clock.t, replace=replace)
        except ModelKeyInUse as refused:
            self._note_expired(refused.expired)
            event("write: key in use")
            with pytest.raises(efface.KeyInUse):
                self._store_write(tenant, items, replace, batch, defaults)
            return None
        epoch = self._store_write(tenant, items, replace, batch, defaults)
        self._note_expired(expired)
        return epoch

    def _store_write(self, tenant, items, replace, batch, defaults):
        if batch is None:
            (i,) = items
            return self.store.write(
                i["key"],
                i["text"],
                tenant=tenant,
                subject=i["subject"],
                purpose=i["purpose"],
                basis=i["basis"],
                ttl=i["ttl"],
                replace=replace,
            )
        return self.store.write_many(batch, tenant=tenant, replace=replace, **defaults)

    @initialize(tenant=tenants, default=claims(), items=batches(3))
    def seed(self, tenant, default, items):
        """Start with a few records, so forgets have something to match from step one."""
        self.write_many(tenant, default, None, items)

    @rule(tenant=tenants, default=claims(), ttl=ttls, items=batches(1))
    def write_many(self, tenant, default, ttl, items):
        subject, purpose, basis = default
        batch, model_items = [], []
        for key, text, claim, item_ttl in items:
            item = {"key": key, "text": text}
            s, p, b, t = subject, purpose, basis, ttl
            if claim is not None:
                s, p, b = claim
                item.update(subject=s, purpose=p, basis=b)
            if item_ttl is not None:
                t = item_ttl
                item["ttl"] = item_ttl
            batch.append(item)
            model_items.append(dict(key=key, text=text, subject=s, purpose=p, basis=b, ttl=t))
        self._write(tenant, model_items, batch=batch, subject=subject, purpose=purpose, basis=basis, ttl=ttl)

    @rule(data=st.data(), tenant=tenants, key=keys, claim=claims(), ttl=ttls, aim=st.booleans())
    def retain(self, data, tenant, key, claim, ttl, aim):
        subject, purpose, basis = claim
        existing = sorted(k for t, k in self.model.records if t == tenant)
        if aim and existing:
            key = data.draw(st.sampled_from(existing), label="existing key")
        # The store honours due expiries before it looks the record up, even when the
        # retain then fails.
        self._note_expired(self.model.expire(self.clock.t))
        try:
            self.model.retain(tenant, key, subject=subject, purpose=purpose, basis=basis, ttl=ttl, now=self.clock.t)
        except ModelNotFound:
            event("retain: not found")
            with pytest.raises(efface.NotFound):
                self.store.retain(key, tenant=tenant, subject=subject, purpose=purpose, basis=basis, ttl=ttl)
        else:
            self.store.retain(key, tenant=tenant, subject=subject, purpose=purpose, basis=basis, ttl=ttl)

    @rule(tenant=tenants, key=keys, purpose=purposes)
    def read(self, tenant, key, purpose):
        now = self.clock.t
        try:
            expected = self.model.read(tenant, key, purpose, now)
        except ModelUnknownPurpose:
            with pytest.raises(efface.UnknownPurpose):
                self.store.read(key, tenant=tenant, purpose=purpose)
            return
        got = self.store.read(key, tenant=tenant, purpose=purpose)
        if expected is None:
            assert got is None
            return
        assert got is not None and got.key == key and got.text == expected and got.tenant == tenant
        claims_got = {(c.subject, c.purpose, c.basis, c.expires_at) for c in got.claims}
        assert claims_got == self.model.live_claims(tenant, key, purpose, now)

    @rule(
        data=st.data(), tenant=tenants, purpose=purposes, subject=st.none() | subjects, k=st.sampled_from([1, 3, K_ALL])
    )
    def recall(self, data, tenant, purpose, subject, k):
        pool = sorted({rec.text for rec in self.model.records.values()} | {t for _, _, t in self.erased})
        query = data.draw(st.sampled_from(pool) if pool else texts, label="query")
        hits = self._check_recall(query, tenant, purpose, subject, k)
        event(f"recall rule: hits={bool(hits)}")

    @rule(data=st.data(), tenant=tenants, selector=selectors(), aim=st.booleans())
    def forget(self, data, tenant, selector, aim):
        claims_here = sorted((k, ck) for (t, k), rec in self.model.records.items() if t == tenant for ck in rec.claims)
        if aim and claims_here:
            # Aim at a claim that exists, through a random subset of its coordinates.
            key, (subject, purpose, _basis) = data.draw(st.sampled_from(claims_here), label="aim")
            selector = data.draw(aimed_selectors(key, subject, purpose), label="aimed selector")
        try:
            expected = self.model.forget(tenant, now=self.clock.t, **selector)
        except ModelUnknownPurpose:
            event("forget: unknown purpose")
            with pytest.raises(efface.UnknownPurpose):
                self.store.forget(tenant=tenant, **selector)
            return
        receipt = self.store.forget(tenant=tenant, **selector)
        self._check_receipt(receipt, expected)
        # Right at acknowledgement (the ANN index has not absorbed it): the erased texts
        # are not served in any purpose.
        for _key, text in expected.erased_texts.items():
            for purpose in sorted(self.model.purposes.get(tenant, ())):
                self._check_recall(text, tenant, purpose)

    @rule(seconds=st.sampled_from([1, 2.5, 5, 10, 31]))
    def advance(self, seconds):
        self.clock.t += seconds

    @rule()
    def sweep(self):
        receipts = self.store.sweep()
        expected = self.model.expire(self.clock.t)
        assert sorted(r.selector.tenant for r in receipts) == sorted(expected)
        for r in receipts:
            self._check_receipt(r, expected[r.selector.tenant])

    @rule()
    def compact(self):
        epoch = self.store.compact()
        for handle in self.receipts:
            st_ = self.store.status(handle)
            assert st_.settled, f"after compact() the erasure {handle} is still pending: {st_.paths}"
            assert st_.epoch <= epoch
        if self.receipts:
            assert st_.pending_deletions == 0

    @rule(data=st.data(), settle=st.booleans())
    def verify(self, data, settle):
        """verify never claims more than the disk shows: unreadable at once (nothing is ever
        served), and erased only when no file of the store holds an erased text (unless a
        live record holds the same text)."""
        if not self.receipts:
            return
        handle = data.draw(st.sampled_from(sorted(self.receipts)), label="handle")
        if settle:
            began = time.monotonic()
            st_ = self.store.wait(handle, timeout=30)
            # Every acknowledged erasure reaches 'erased', and wait returns by its timeout.
            assert st_.erased, f"wait(30) returned with the erasure not erased: {st_.paths}"
            assert time.monotonic() - began < 30 + 5, "wait overran its timeout"
        v = self.store.verify(handle)
        self.model.ledger_entries += 1
        event(f"verify: {v.level}")
        assert v.level in ("unreadable", "erased"), [c.to_dict() for c in v.failed]
        if settle and self.erased_after_wait:
            short = any(len(t.encode()) < 8 for t in self.receipts[handle].erased_texts.values())
            # After wait, verify says 'erased' unless a text is too short to be told from other
            # bytes: a live record's copy in a WAL page image, a stray window of a short text,
            # or windows of another erasure's pending items are not residue, and a stale copy
            # of an erased cell in the unallocated gap of a live table page (which SQLite's
            # page rebuilds leave) is found by wait's scan and rewritten away.
            if v.level != "erased" and not short:
                live = [rec.text for rec in self.model.records.values()]
                left = [
                    t
                    for t in self.receipts[handle].erased_texts.values()
                    if not any(t in other for other in live) and self._on_disk(t)
                ]
                raise AssertionError(
                    f"verify refused 'erased' after wait ({len(left)} erased texts on disk): "
                    f"{[c.to_dict() for c in v.failed]}"
                )
        if v.level == "erased":
            # The bytes are checked when they are proven gone; a later verify shows that proof
            # as 'recorded' (the fingerprints went with it), and records written since may
            # hold the same words again: those bytes are theirs, their own erasure checks them.
            fresh = any(c.name == "bytes" and c.outcome == "pass" for c in v.checks)
            live = [rec.text for rec in self.model.records.values()]
            for text in self.receipts[handle].erased_texts.values() if fresh else ():
                if any(text in other for other in live):
                    continue
                assert not self._on_disk(text), "verify said erased; the bytes remain"

    # -- hostile identifiers and overwrites (issue #12) ----------------------------------
    @rule(tenant=tenants, subject=subjects, form=forms)
    def register_name(self, tenant, subject, form):
        """A subject registers its name in some Unicode form (once, until it is erased)."""
        if (tenant, subject) in self.model.names:
            return
        ident = FORMS[form](NAMES[subject])
        self.store.register_subject(subject, tenant=tenant, identifiers=[ident])
        self._note_expired(self.model.register(tenant, subject, [ident], now=self.clock.t, phrase=NAMES[subject]))
        event(f"register name: {form}")

    @rule(tenant=tenants, key=keys, claim=claims(), named=subjects, form=forms, around=texts, ttl=ttls)
    def write_naming(self, tenant, key, claim, named, form, around, ttl):
        """A record (a digest, say) that names a subject in some Unicode form."""
        subject, purpose, basis = claim
        first, *rest = around.split()
        text = " ".join([first, FORMS[form](NAMES[named]), *rest])
        self._write(tenant, [dict(key=key, text=text, subject=subject, purpose=purpose, basis=basis, ttl=ttl)])

    @rule(data=st.data(), tenant=tenants, claim=claims(), text=texts, ttl=ttls)
    def overwrite(self, data, tenant, claim, text, ttl):
        """Another subject writes over an existing record with ``replace=True``: the old
        record goes with its claims (a ``replace`` receipt), unless a legal basis holds it."""
        subject, purpose, basis = claim
        now = self.clock.t
        held = sorted(
            k
            for (t, k), rec in self.model.records.items()
            if t == tenant and any(exp is None or exp > now for exp in rec.claims.values())
        )
        if not held:
            return
        key = data.draw(st.sampled_from(held), label="key to overwrite")
        epoch = self._write(
            tenant, [dict(key=key, text=text, subject=subject, purpose=purpose, basis=basis, ttl=ttl)], replace=True
        )
        expected = self.model.last_replace
        if epoch is None:
            return
        rows = [r for r in self.store.receipts(tenant) if r["kind"] == "replace" and r["epoch"] == epoch]
        if expected is None:
            assert rows == [], "a write replaced nothing, yet left a replace receipt"
            return
        (row,) = rows
        assert row["handle"] not in self.receipts
        assert len(row["body"]["erased"]) == len(expected.erased) == 1
        assert len(row["body"]["released"]) == sum(expected.released.values())
        assert row["body"]["retained"] == [] and row["body"]["quarantined"] == []
        self.receipts[row["handle"]] = expected
        self.erased += [(tenant, k, t) for k, t in expected.erased_texts.items()]
        event("overwrite: replaced")
        # Right at acknowledgement: the replaced text is served in no purpose.
        for old in expected.erased_texts.values():
            for p in sorted(self.model.purposes.get(tenant, ())):
                self._check_recall(old, tenant, p)

    @precondition(lambda self: self.persists)  # memory origin: nothing persists across reopen
    @rule()
    def reopen(self):
        i = self.stores.index(self.store)
        self.store.close()
        self.store = self.stores[i] = self._open(i)
        for handle, expected in self.receipts.items():
            st_ = self.store.status(handle)
            assert st_.kind == expected.kind
            assert st_.counts["erased"] == len(expected.erased)
            assert st_.counts["released"] == sum(expected.released.values())
            assert st_.counts["retained"] == sum(expected.retained.values())
        check = self.store.verify_ledger()
        assert check.ok, check.problems
        assert check.entries == self.model.ledger_entries

    # -- identifiers go with the last claim (docs/concepts.md §8) ------------------------------------
    @rule(data=st.data(), tenant=tenants, subject=subjects)
    def register(self, data, tenant, subject):
        ids = data.draw(st.lists(st.sampled_from(IDENTIFIERS[subject]), min_size=1, unique=True), label="ids")
        self.store.register_subject(subject, tenant=tenant, identifiers=ids)
        self._note_expired(self.model.register(tenant, subject, ids, now=self.clock.t))

    @rule(data=st.data(), tenant=tenants, how=st.sampled_from(["key", "prefix", "purpose"]))
    def forget_last_claim(self, data, tenant, how):
        """Aim a forget by key, prefix or purpose (never by subject) at every claim of a
        registered subject when one selector of that kind covers them all (one key, a common
        prefix, one purpose), else at one claim of the subject with the fewest."""
        claims_of: dict[str, list[tuple[str, str]]] = {}
        for (t, k), rec in sorted(self.model.records.items()):
            for s, p, _b in rec.claims:
                if t == tenant and (t, s) in self.model.subjects:
                    claims_of.setdefault(s, []).append((k, p))
        if not claims_of:
            return

        def covering(claims: list[tuple[str, str]]) -> dict | None:
            if how == "purpose":
                return {"purpose": claims[0][1]} if len({p for _k, p in claims}) == 1 else None
            # A key prefix is a character prefix, which is what commonprefix computes.
            common = os.path.commonprefix(sorted(k for k, _p in claims))  # noqa: RUF071
            if how == "key":
                return {"key": common} if len({k for k, _p in claims}) == 1 else None
            return {"prefix": common} if common else None

        whole = {s: sel for s, c in claims_of.items() if (sel := covering(c)) is not None}
        if whole:
            subject = data.draw(st.sampled_from(sorted(whole)), label="subject")
            selector = whole[subject]
        else:
            fewest = min(len(c) for c in claims_of.values())
            subject = data.draw(st.sampled_from(sorted(s for s, c in claims_of.items() if len(c) == fewest)))
            key, purpose = data.draw(st.sampled_from(claims_of[subject]), label="claim")
            selector = {"key": {"key": key}, "prefix": {"prefix": key}, "purpose": {"purpose": purpose}}[how]
        expected = self.model.forget(tenant, now=self.clock.t, **selector)
        receipt = self.store.forget(tenant=tenant, **selector)
        self._check_receipt(receipt, expected)
        event(f"forget_last_claim by {how}: identifiers erased={bool(expected.subjects_erased)}")

    @rule(data=st.data(), tenant=tenants, subject=subjects, key=keys, text=texts, purpose=purposes)
    def expire_last_claim(self, data, tenant, subject, key, text, purpose):
        """Give a subject a short-lived claim, then let time pass it: the sweep (explicit or
        the one every mutation does first) takes the identifiers once it was the last."""
        if (tenant, subject) not in self.model.subjects:
            self.register(data, tenant, subject)
        basis = "legal_hold" if purpose == "audit" else "consent"
        self.write(tenant, key, text, (subject, purpose, basis), 1)
        self.clock.t += 1
        erased_before = sum(bool(o.subjects_erased) for o in self.receipts.values())
        if data.draw(st.booleans(), label="explicit sweep"):
            self.sweep()
            erased_now = sum(bool(o.subjects_erased) for o in self.receipts.values())
            event(f"expire_last_claim by sweep: identifiers erased={erased_now > erased_before}")
        else:  # the next mutation honours it first
            self.register(data, tenant, data.draw(subjects, label="next registration"))

    def _files(self) -> list[bytes]:
        blobs = []
        for d, _, names in os.walk(self.dir):
            for f in names:
                try:
                    with open(os.path.join(d, f), "rb") as fh:
                        blobs.append(fh.read())
                except FileNotFoundError:  # a temporary file renamed while we listed
                    continue
        return blobs

    def _where(self, needle: bytes) -> list[tuple[str, int]]:
        """(file, offset) of every copy of ``needle`` in the store directory (for messages)."""
        out = []
        for d, _, names in os.walk(self.dir):
            for f in names:
                with open(os.path.join(d, f), "rb") as fh:
                    data = fh.read()
                at = data.find(needle)
                while at >= 0:
                    out.append((os.path.relpath(os.path.join(d, f), self.dir), at))
                    at = data.find(needle, at + 1)
        return out

    @rule(data=st.data())
    def verify_identifiers(self, data):
        """Wait for and verify an erasure (a recent one that erased identifiers, when there
        is one), then scan every file's raw bytes: ``erased`` from a fresh byte scan
        only when none of its texts or identifiers is left (bytes a live record or a live
        registration holds do not count). A later verification shows the scan as
        ``recorded``: the same bytes may have been written and erased again since, so the
        raw scan is compared with fresh scans only."""
        if not self.receipts:
            return
        # Draws depend on the model only (never on what the store answered), or Hypothesis
        # cannot replay them; the newest erasure with identifiers is the likeliest unproven.
        with_ids = [h for h in self.receipts if self.receipts[h].erased_identifiers]
        handle = data.draw(st.sampled_from(with_ids[-3:] or list(self.receipts)[-3:]), label="handle")
        expected = self.receipts[handle]
        self.store.wait(handle, timeout=30)
        v = self.store.verify(handle)
        self.model.ledger_entries += 1
        assert v.level in ("unreadable", "erased"), [c.to_dict() for c in v.failed]
        short = any(len(t.encode()) < 8 for t in expected.erased_texts.values())
        # After wait, 'erased' (unless a text is too short to be proven gone); never 'erased'
        # with the bytes on disk (below).
        assert v.level == "erased" or short or not self.erased_after_wait, [c.to_dict() for c in v.failed]
        (scan,) = [c for c in v.checks if c.name == "bytes"]
        event(f"verify_identifiers: {v.level}, {scan.outcome} (identifiers: {bool(expected.erased_identifiers)})")
        if v.level != "erased" or scan.outcome != "pass":
            return
        blobs = self._files()
        live_texts = [rec.text for rec in self.model.records.values()]
        live_ids = self.model.live_identifiers()
        for text in expected.erased_texts.values():
            if not any(text in other for other in live_texts):
                assert not any(text.encode() in b for b in blobs), "verify said erased; an erased text remains"
        for ident in expected.erased_identifiers:
            if ident not in live_ids:
                assert not any(ident.encode() in b for b in blobs), (
                    "verify said erased; an identifier remains",
                    ident,
                    self._where(ident.encode()),
                    self.store._origin.all_subjects(),
                    [c.to_dict() for c in v.checks],
                )

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def reads_agree(self):
        for _ in self._through_each():
            self._reads_agree()

    def _reads_agree(self):
        now = self.clock.t
        for tenant in TENANTS:
            for purpose in PURPOSES:
                known = purpose in self.model.purposes.get(tenant, ())
                for key in KEYS:
                    if not known:
                        with pytest.raises(efface.UnknownPurpose):
                            self.store.read(key, tenant=tenant, purpose=purpose)
                        break
                    got = self.store.read(key, tenant=tenant, purpose=purpose)
                    expected = self.model.read(tenant, key, purpose, now)
                    assert (got.text if got else None) == expected, (
                        f"read({key!r}, {tenant}/{purpose}) -> {got.text if got else None!r}, model says {expected!r}"
                    )

    @invariant()
    def recall_agrees(self):
        for _ in self._through_each():
            self._recall_agrees()

    def _recall_agrees(self):
        # With every word of the vocabulary as the query, each index proposes every record
        # it holds (live, erased-but-not-absorbed, expired): all of it passes the check.
        everything = " ".join(WORDS)
        for tenant in TENANTS:
            for purpose in sorted(self.model.purposes.get(tenant, ())):
                self._check_recall(everything, tenant, purpose, ann_complete=True)
                for t, _key, text in self.erased[-2:]:
                    if t == tenant:
                        self._check_recall(text, tenant, purpose)

    @invariant()
    def ledger_counts(self):
        assert len(self.store.ledger()) == self.model.ledger_entries


class BackgroundStoreMachine(StoreMachine):
    """The same machine with the background compactor running, as users run the store (its
    default): every rule races the compactor's rounds, and every ``wait`` must still reach
    ``erased`` (issue #33: an erasure acknowledged during a saving round was never erased)."""

    BACKGROUND = True


class TwoStoreMachine(StoreMachine):
    """Two stores on one PostgreSQL database, as two efface servers are (each its own cache
    directory, ANN files and word index, one database): every operation goes through one of
    them (:meth:`switch` picks which), and after every step both must agree with the model. So
    a write through one is read and recalled through the other, and a forget acknowledged by
    one is never served by the other from its next request on (issue #34 item 4)."""

    STORES = 2

    @rule(which=st.sampled_from([0, 1]))
    def switch(self, which):
        self.store = self.stores[which]


_SETTINGS = settings(
    max_examples=PROFILE["max_examples"],
    stateful_step_count=PROFILE["stateful_step_count"],
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_BACKGROUND = settings(_SETTINGS, max_examples=max(10, PROFILE["max_examples"] // 3))

PG_PROFILES = {
    "default": dict(max_examples=4, stateful_step_count=30),
    "slow": dict(max_examples=6, stateful_step_count=40),
    "soak": dict(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "400")) // 4, stateful_step_count=60),
}
PG_PROFILES["ci"] = PG_PROFILES["slow"]
"""On PostgreSQL each example opens stores on a fresh database, and every read and recall is a
round trip: fewer, shorter examples than on SQLite (tests/README figures in the report)."""
PG_PROFILE = PG_PROFILES.get(os.environ.get("HYPOTHESIS_PROFILE", bounded("default", "slow")), PG_PROFILES["default"])
_PG_SETTINGS = settings(
    _SETTINGS, max_examples=PG_PROFILE["max_examples"], stateful_step_count=PG_PROFILE["stateful_step_count"]
)


def _run(machine: type[StoreMachine], backend: str, request, chosen: settings) -> None:
    """Run ``machine`` on ``backend`` (the parametrised ``backend`` fixture's origin)."""
    attrs: dict = {"ORIGIN": backend}
    if backend == "postgres":
        attrs["PG"] = request.getfixturevalue("pg")
        chosen = settings(
            chosen,
            max_examples=min(chosen.max_examples, _PG_SETTINGS.max_examples),
            stateful_step_count=min(chosen.stateful_step_count, _PG_SETTINGS.stateful_step_count),
        )
    on = type(f"{machine.__name__}On{backend.title()}", (machine,), attrs)
    run_state_machine_as_test(on, settings=chosen)


def test_store_machine(backend, request):
    """The machine on every origin (the memory origin's reopen rule never runs)."""
    _run(StoreMachine, backend, request, _SETTINGS)


def test_background_machine(backend, request):
    if backend == "memory":
        pytest.skip("memory origin: the background machine races compactor rounds over files it does not keep")
    _run(BackgroundStoreMachine, backend, request, _BACKGROUND)


def test_two_stores_on_one_database_machine(pg, request):
    _run(TwoStoreMachine, "postgres", request, _PG_SETTINGS)
