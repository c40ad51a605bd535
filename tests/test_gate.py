"""The agent-side gate (docs/concepts.md §5): classify, assert_deleted, Gate, and EffaceTool.

The gate is tested against in-process tools written here, each replaying one failure of a
real system: Incident A (stale ANN candidates served for a window after forget), Incident B
(an empty cached listing taken as proof while a replica still serves the value) and a
replica that lags by epochs. Time comes from a FakeClock; nothing sleeps.
"""

from __future__ import annotations

import json
import math
import pickle
import re
import sqlite3
from dataclasses import replace

import pytest

from efface.adapters.efface_store import EffaceTool
from efface.errors import (
    CacheRoutedVerification,
    ErasureNotSettled,
    InvalidInput,
    UnboundedPropagation,
    UnenumeratedScope,
    UnverifiableDeletion,
)
from efface.gate import ForgetAck, Gate, MemoryTool, ToolHit, VerificationRead, assert_deleted, classify
from efface.gate.state import GateState

from conftest import T0, FakeClock, on_postgres

SCOPE = "acme"
SECRET_KEY = "acme:alice:note-7731"
SECRET_TEXT = "alice keeps her spare key under the blue flowerpot"
SECRET_SUBJECT = "alice-subject-4411"


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _match(query: str, items: dict[str, tuple[str, str | None]], k: int) -> list[ToolHit]:
    """Word-overlap recall over ``key -> (text, subject)``: enough to stand in for ANN."""
    q = _words(query)
    scored = sorted(((len(q & _words(t)), key) for key, (t, _s) in items.items() if q & _words(t)), reverse=True)
    return [
        ToolHit(key, items[key][0], float(n), {"subject": items[key][1]} if items[key][1] else {})
        for n, key in scored[:k]
    ]


# -- in-process tools ---------------------------------------------------------------------------
class IncidentATool:
    """Incident A: forget drops keys from the primary at once, but the ANN candidate set (and
    the chunk cache the reranker reads text from) keeps serving them for ``stale_s`` seconds.
    Acknowledges with a message; no epoch."""

    name = "incident-a"

    def __init__(self, clock: FakeClock, stale_s: float = 900.0):
        self.clock, self.stale_s = clock, stale_s
        self.primary: dict[str, tuple[str, str | None]] = {}
        self.ann: dict[str, tuple[str, str | None]] = {}
        self.compactions: list[tuple[float, int, tuple[str, ...]]] = []
        self.epoch = self.applied = 0
        self.fail_forget = False

    def write(self, key, text, *, scope, subject=None, metadata=None):
        self.primary[key] = self.ann[key] = (text, subject)

    def _compact(self):
        for due, epoch, keys in list(self.compactions):
            if self.clock() >= due:
                for key in keys:
                    if key not in self.primary:
                        self.ann.pop(key, None)
                self.applied = max(self.applied, epoch)
                self.compactions.remove((due, epoch, keys))

    def recall(self, query, *, scope, k=10):
        self._compact()
        return _match(query, self.ann, k)  # the tombstone filtered the primary, not the ANN candidates

    def forget(self, *, scope, subject=None, keys=None):
        if self.fail_forget:
            raise ConnectionError("tool went away mid-forget")
        keys = tuple(keys or (key for key, (_t, s) in self.primary.items() if s == subject))
        for key in keys:
            self.primary.pop(key, None)
        self.epoch += 1
        self.compactions.append((self.clock() + self.stale_s, self.epoch, keys))
        return ForgetAck(
            raw={"status": "erased", "keys": len(keys)},
            scope=scope,
            keys=keys,
            acknowledged_at=self.clock(),
            epoch=self._ack_epoch(),
        )

    def _ack_epoch(self):
        return None


class IncidentAWithEpochs(IncidentATool):
    """Incident A, but the tool numbers its erasures and reports the epoch its ANN reflects."""

    def _ack_epoch(self):
        return self.epoch

    def read_epoch(self, scope):
        self._compact()
        return self.applied


class IncidentBTool:
    """Incident B: the forget invalidates a read-through listing cache (90 s TTL) and
    'verifies' with a listing that comes back empty from that cache, while point reads and
    recall are served by a replica that applies the tombstone ``lag_s`` seconds late. The
    acknowledgement enumerates only the 7-day prefix scope, not the 30-day tenant scope."""

    name = "incident-b"

    def __init__(self, clock: FakeClock, lag_s: float = 300.0):
        self.clock, self.lag_s = clock, lag_s
        self.origin: dict[str, tuple[str, str | None]] = {}
        self.replica: dict[str, tuple[str, str | None]] = {}
        self.tombstones: list[tuple[float, str]] = []
        self.listing_cache: dict[str, tuple[float, tuple[str, ...]]] = {}

    def write(self, key, text, *, scope, subject=None, metadata=None):
        self.origin[key] = self.replica[key] = (text, subject)

    def _replicate(self):
        for due, key in list(self.tombstones):
            if self.clock() >= due:
                self.replica.pop(key, None)
                self.tombstones.remove((due, key))

    def listing(self, prefix: str) -> tuple[str, ...]:
        hit = self.listing_cache.get(prefix)
        if hit is None or hit[0] <= self.clock():
            hit = (self.clock() + 90.0, tuple(k for k in self.origin if k.startswith(prefix)))
            self.listing_cache[prefix] = hit
        return hit[1]

    def point_read(self, key: str) -> str | None:
        self._replicate()
        return self.replica.get(key, (None,))[0]

    def recall(self, query, *, scope, k=10):
        self._replicate()
        return _match(query, self.replica, k)

    def verification_read(self, keys, scope):
        self._replicate()
        return VerificationRead("replica", tuple(k for k in keys if k in self.replica), self.clock())

    def forget(self, *, scope, subject=None, keys=None):
        keys = tuple(keys or ())
        for key in keys:
            self.origin.pop(key, None)
            self.tombstones.append((self.clock() + self.lag_s, key))
        self.listing_cache.clear()
        listed = self.listing("acme:session:")
        return ForgetAck(
            raw={"success": True},
            scope=scope,
            keys=keys,
            acknowledged_at=self.clock(),
            handle="b-1",
            scopes_cleared=("prefix:7d",),
            derived_covered=("listing-cache",),
            max_propagation_s=90.0,
            verification=VerificationRead("cache", tuple(k for k in keys if k in listed), self.clock()),
        )


class ReplicaTool:
    """A primary that numbers every erasure, and a read replica that applies the log only when
    ``replicate()`` is called. Acknowledgements carry full evidence; reads and ``read_epoch``
    come from the replica."""

    name = "replica"

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.primary: dict[str, tuple[str, str | None]] = {}
        self.replica: dict[str, tuple[str, str | None]] = {}
        self.log: list[tuple[int, str, str, tuple[str, str | None] | None]] = []
        self.epoch = self.applied = 0

    def write(self, key, text, *, scope, subject=None, metadata=None):
        self.epoch += 1
        self.primary[key] = (text, subject)
        self.log.append((self.epoch, "put", key, (text, subject)))

    def replicate(self, upto: int | None = None):
        for epoch, op, key, value in self.log:
            if self.applied < epoch <= (self.epoch if upto is None else upto):
                if op == "put":
                    self.replica[key] = value
                else:
                    self.replica.pop(key, None)
                self.applied = epoch

    def read_epoch(self, scope):
        return self.applied

    def recall(self, query, *, scope, k=10):
        return _match(query, self.replica, k)

    def forget(self, *, scope, subject=None, keys=None):
        keys = tuple(keys or ())
        self.epoch += 1
        for key in keys:
            self.primary.pop(key, None)
            self.log.append((self.epoch, "drop", key, None))
        return ForgetAck(
            raw={"handle": f"r-{self.epoch}"},
            scope=scope,
            keys=keys,
            acknowledged_at=self.clock(),
            handle=f"r-{self.epoch}",
            epoch=self.epoch,
            scopes_cleared=("tenant:30d",),
            scopes_retained=(),
            derived_covered=("replica",),
            max_propagation_s=5.0,
            verification=VerificationRead("origin", tuple(k for k in keys if k in self.primary), self.clock()),
        )


class EvidenceTool(IncidentATool):
    """A tool with no epoch whose acknowledgement is otherwise full evidence: handle, origin
    read, scopes, structures and a declared bound ``bound_s``. Its ANN really lags ``stale_s``
    (longer than the bound when the tool is lying)."""

    name = "evidence"

    def __init__(self, clock, stale_s=60.0, bound_s=60.0):
        super().__init__(clock, stale_s)
        self.bound_s = bound_s

    def forget(self, *, scope, subject=None, keys=None):
        ack = super().forget(scope=scope, subject=subject, keys=keys)
        return replace(
            ack,
            handle=f"e-{self.epoch}",
            scopes_cleared=("tenant:30d",),
            derived_covered=("ann",),
            max_propagation_s=self.bound_s,
            verification=VerificationRead("origin", tuple(k for k in ack.keys if k in self.primary), self.clock()),
        )


class BareTool(IncidentATool):
    """The MCP reference memory server's answer: a bare boolean."""

    def forget(self, *, scope, subject=None, keys=None):
        super().forget(scope=scope, subject=subject, keys=keys)
        return True


@pytest.fixture
def gate_path(tmp_path):
    return tmp_path / "gate.db"


@pytest.fixture
def gates(gate_path, clock):
    """Factory for gates on ``gate_path`` (the same state file each time: a restart)."""
    opened: list[Gate] = []

    def _gate(tool, **options) -> Gate:
        options.setdefault("clock", clock)
        g = Gate(tool, gate_path, **options)
        opened.append(g)
        return g

    yield _gate
    for g in opened:
        g.close()


def _seed(tool):
    tool.write(SECRET_KEY, SECRET_TEXT, scope=SCOPE, subject=SECRET_SUBJECT)
    tool.write("acme:bob:1", "bob keeps his bike in the blue shed", scope=SCOPE, subject="bob")


def _keys(hits):
    return {h.key for h in hits}


# -- classify ------------------------------------------------------------------------------------
FULL = ForgetAck(
    raw={"handle": "h-1"},
    scope=SCOPE,
    keys=(SECRET_KEY,),
    acknowledged_at=T0,
    handle="h-1",
    epoch=7,
    scopes_cleared=("prefix:7d", "tenant:30d"),
    scopes_retained=(),
    derived_covered=("ann", "fts", "cache"),
    max_propagation_s=60.0,
    verification=VerificationRead("origin", (), T0 + 1),
)
REQUIRED = ("prefix:7d", "tenant:30d")
LATER = T0 + 61


def test_tools_written_here_satisfy_the_protocol(clock):
    for tool in (IncidentATool(clock), IncidentBTool(clock), ReplicaTool(clock)):
        assert isinstance(tool, MemoryTool)


def test_full_evidence_ack_is_evidence():
    c = classify(FULL, REQUIRED, required_structures=["ann", "fts"], now=LATER)
    assert c.level == "evidence" and c.evidence
    assert c.reasons == () and c.errors() == ()
    assert all(ch.met for ch in c.checks)
    assert c.scopes == {"prefix:7d": "cleared", "tenant:30d": "cleared"}
    assert c.structures == {"ann": True, "fts": True}
    assert c.settles_at == T0 + 60
    assert assert_deleted(FULL, REQUIRED, required_structures=["ann"], now=LATER) == classify(
        FULL, REQUIRED, required_structures=["ann"], now=LATER
    )


@pytest.mark.parametrize("raw", [True, {"status": "erased", "keys": 412}, "Memory deleted successfully", None])
def test_bare_acknowledgements_are_intent_with_every_reason(raw):
    for ack in (raw, ForgetAck(raw=raw, scope=SCOPE, acknowledged_at=T0)):
        c = classify(ack, REQUIRED, now=LATER)
        assert c.level == "intent"
        assert [ch.name for ch in c.checks if not ch.met] == [
            "handle",
            "verification",
            "scopes",
            "structures",
            "propagation",
        ]
        assert len(c.reasons) == 5
        assert c.errors() == ()  # saying nothing is intent, not one of the typed errors
        with pytest.raises(UnverifiableDeletion) as exc:
            assert_deleted(ack, REQUIRED, now=LATER)
        assert type(exc.value) is UnverifiableDeletion
        assert exc.value.classification == c


@pytest.mark.parametrize(
    "change, failing, error",
    [
        (dict(handle=None), "handle", None),
        (dict(verification=None), "verification", None),
        (dict(verification=VerificationRead("origin", (SECRET_KEY,), T0 + 1)), "verification", None),
        (dict(verification=VerificationRead("origin", (), T0 - 5)), "verification", None),
        (dict(keys=()), "verification", None),
        (dict(verification=VerificationRead("cache", (), T0 + 1)), "verification", CacheRoutedVerification),
        (dict(verification=VerificationRead("replica", (), T0 + 1)), "verification", CacheRoutedVerification),
        (dict(verification=VerificationRead("unknown", (), T0 + 1)), "verification", CacheRoutedVerification),
        (dict(scopes_cleared=("prefix:7d",)), "scopes", UnenumeratedScope),
        (dict(scopes_cleared=()), "scopes", UnenumeratedScope),
        (dict(scopes_cleared=None, scopes_retained=None), "scopes", None),
        (dict(scopes_cleared=("prefix:7d",), scopes_retained=("tenant:30d",)), "scopes", None),
        (dict(derived_covered=None), "structures", None),
        (dict(derived_covered=("fts",)), "structures", None),
        (dict(max_propagation_s=None), "propagation", UnboundedPropagation),
        (dict(max_propagation_s=math.inf), "propagation", UnboundedPropagation),
        (dict(max_propagation_s=math.nan), "propagation", UnboundedPropagation),
        (dict(max_propagation_s=3600.0), "propagation", None),
        (dict(acknowledged_at=0.0), "propagation", None),
    ],
)
def test_each_missing_requirement_is_named_and_typed(change, failing, error):
    ack = replace(FULL, **change)
    c = classify(ack, REQUIRED, required_structures=["ann"], now=LATER)
    assert c.level == "intent"
    assert [ch.name for ch in c.checks if not ch.met] == [failing]
    assert len(c.reasons) == 1 and c.reasons[0] == c.check(failing).detail
    assert c.check(failing).error is error
    with pytest.raises(error or UnverifiableDeletion) as exc:
        assert_deleted(ack, REQUIRED, required_structures=["ann"], now=LATER)
    assert type(exc.value) is (error or UnverifiableDeletion)
    assert c.reasons[0] in str(exc.value)
    assert SECRET_KEY not in str(exc.value)


def test_scope_states_and_window_are_reported():
    ack = replace(FULL, scopes_cleared=("prefix:7d",), scopes_retained=("legal",))
    c = classify(ack, ["prefix:7d", "legal", "tenant:30d"], now=T0 + 10)
    assert c.scopes == {"prefix:7d": "cleared", "legal": "retained", "tenant:30d": "unenumerated"}
    assert c.check("scopes").error is UnenumeratedScope
    assert "'tenant:30d'" in c.check("scopes").detail
    assert not c.check("propagation").met and c.settles_at == T0 + 60
    assert "50 s left" in c.check("propagation").detail


def test_no_required_scope_is_never_evidence():
    c = classify(FULL, [], now=LATER)
    assert c.level == "intent" and [ch.name for ch in c.checks if not ch.met] == ["scopes"]


def test_undeclared_bound_without_derived_structures_is_plain_intent():
    c = classify(replace(FULL, derived_covered=(), max_propagation_s=None), REQUIRED, now=LATER)
    assert c.check("propagation").error is None and not c.check("propagation").met


def test_assert_deleted_raises_the_first_typed_error_and_lists_every_reason():
    ack = replace(
        FULL, verification=VerificationRead("cache", (), T0 + 1), scopes_cleared=("prefix:7d",), max_propagation_s=None
    )
    c = classify(ack, REQUIRED, now=LATER)
    assert c.errors() == (CacheRoutedVerification, UnenumeratedScope, UnboundedPropagation)
    with pytest.raises(CacheRoutedVerification) as exc:
        assert_deleted(ack, REQUIRED, now=LATER)
    assert all(r in str(exc.value) for r in c.reasons)
    for typed in (CacheRoutedVerification, UnenumeratedScope, UnboundedPropagation):
        assert issubclass(typed, UnverifiableDeletion)


def test_errors_take_their_context_as_keywords_after_the_message():
    plain = ErasureNotSettled("behind")
    assert (str(plain), plain.scope, plain.required_epoch, plain.applied_epoch) == ("behind", None, None, None)
    with pytest.raises(TypeError):
        ErasureNotSettled("behind", SCOPE)  # context is keyword-only, as in httpx's RequestError(message, *, request)
    e = ErasureNotSettled("behind", scope=SCOPE, required_epoch=3, applied_epoch=2)
    assert (e.scope, e.required_epoch, e.applied_epoch) == (SCOPE, 3, 2)
    c = classify(True, REQUIRED, now=LATER)
    for kind in (UnverifiableDeletion, UnenumeratedScope, CacheRoutedVerification, UnboundedPropagation):
        assert kind("unproven").classification is None
        err = kind("unproven", classification=c)
        assert (str(err), err.classification) == ("unproven", c)
        back = pickle.loads(pickle.dumps(err))  # e.g. across a process pool: the context survives
        assert (type(back), str(back), back.classification) == (kind, "unproven", c)
    back = pickle.loads(pickle.dumps(e))
    assert (back.scope, back.required_epoch, back.applied_epoch) == (SCOPE, 3, 2)


def test_classify_rejects_a_string_for_a_list():
    with pytest.raises(InvalidInput):
        classify(FULL, "prefix:7d")


# -- Incident A: stale ANN candidates --------------------------------------------------------------
def test_incident_a_with_epochs_refused_during_the_window_allowed_after(gates, clock):
    tool = IncidentAWithEpochs(clock, stale_s=900)
    _seed(tool)
    gate = gates(tool)
    result = gate.forget(scope=SCOPE, subject=SECRET_SUBJECT)
    assert result.classification.level == "intent"
    assert result.ack.epoch == 1

    clock.advance(600)
    assert SECRET_KEY in _keys(tool.recall("blue flowerpot", scope=SCOPE))  # the tool itself still serves it
    with pytest.raises(ErasureNotSettled) as exc:
        gate.recall("blue flowerpot", scope=SCOPE)
    err = exc.value
    assert (err.scope, err.required_epoch, err.applied_epoch) == (SCOPE, 1, 0)
    assert "scope 'acme'" in str(err) and "epoch 1" in str(err) and "epoch 0" in str(err)
    # An unrelated query is refused too: the whole scope waits, nothing is filtered.
    with pytest.raises(ErasureNotSettled):
        gate.recall("bike", scope=SCOPE)

    clock.advance(301)
    hits = gate.recall("blue flowerpot", scope=SCOPE)
    assert SECRET_KEY not in _keys(hits) and "acme:bob:1" in _keys(hits)
    assert gate.pending(SCOPE) == 0


def test_incident_a_without_epochs_settles_only_after_interval_and_clean_probes(gates, clock):
    tool = IncidentATool(clock, stale_s=900)
    _seed(tool)
    gate = gates(tool, settle_s=60)
    gate.forget(scope=SCOPE, subject=SECRET_SUBJECT, probes=["flowerpot"])

    clock.advance(30)
    with pytest.raises(ErasureNotSettled, match="settling interval"):
        gate.recall("bike", scope=SCOPE)

    clock.advance(90)  # interval over, but the stale candidate is still served
    with pytest.raises(ErasureNotSettled, match="sentinel probe still found 1"):
        gate.recall("bike", scope=SCOPE)  # caught by the forget's probe query, not by this query
    with pytest.raises(ErasureNotSettled, match="sentinel probe still found 2"):
        gate.recall("blue flowerpot", scope=SCOPE)  # the recall itself is a probe, and is refused whole
    assert gate.pending(SCOPE) == 1

    clock.advance(800)
    assert _keys(gate.recall("blue", scope=SCOPE)) == {"acme:bob:1"}
    assert gate.pending(SCOPE) == 0


def test_incident_a_policy_refuse_stays_closed_and_says_so(gates, clock):
    tool = IncidentATool(clock, stale_s=900)
    _seed(tool)
    gate = gates(tool, policy="refuse", settle_s=60)
    gate.forget(scope=SCOPE, keys=[SECRET_KEY])
    clock.advance(10_000)
    with pytest.raises(ErasureNotSettled, match="policy 'refuse'"):
        gate.recall("bike", scope=SCOPE)
    assert gate.recall("bike", scope="other-tenant")  # other scopes are not refused (this fake ignores scope)
    assert gate.release(SCOPE) == 1
    assert _keys(gate.recall("bike", scope=SCOPE)) == {"acme:bob:1"}


def test_rewriting_an_erased_key_through_the_gate_does_not_block_the_scope(gates, clock):
    tool = IncidentATool(clock, stale_s=900)
    _seed(tool)
    gate = gates(tool, settle_s=60)
    gate.forget(scope=SCOPE, keys=[SECRET_KEY])
    gate.write(SECRET_KEY, "the spare key is now with the neighbour", scope=SCOPE, subject=SECRET_SUBJECT)
    clock.advance(61)
    assert SECRET_KEY in _keys(gate.recall("spare key neighbour", scope=SCOPE))
    assert gate.pending(SCOPE) == 0


def test_hits_the_gate_cannot_judge_count_as_found(gates, clock):
    tool = IncidentATool(clock, stale_s=0)
    tool.write("acme:n1", "a note about the flowerpot", scope=SCOPE)  # no subject on the hit
    gate = gates(tool, settle_s=60)
    gate.forget(scope=SCOPE, subject=SECRET_SUBJECT)  # a subject forget, no keys in the ack
    tool.compactions.clear()
    clock.advance(61)
    with pytest.raises(ErasureNotSettled, match="cannot judge"):
        gate.recall("flowerpot", scope=SCOPE)


def test_evidence_settles_an_epochless_scope_once_its_window_elapsed_even_under_refuse(gates, clock):
    tool = EvidenceTool(clock, stale_s=60, bound_s=60)
    _seed(tool)
    gate = gates(tool, policy="refuse", settle_s=3600)
    result = gate.forget(scope=SCOPE, keys=[SECRET_KEY], required_scopes=["tenant:30d"])
    assert [ch.name for ch in result.classification.checks if not ch.met] == ["propagation"]
    clock.advance(30)
    with pytest.raises(ErasureNotSettled, match="policy 'refuse'"):
        gate.recall("bike", scope=SCOPE)
    clock.advance(31)
    assert _keys(gate.recall("blue", scope=SCOPE)) == {"acme:bob:1"}
    assert gate.pending(SCOPE) == 0


def test_a_tool_that_breaks_its_declared_bound_is_caught_by_the_probe(gates, clock):
    tool = EvidenceTool(clock, stale_s=900, bound_s=60)
    _seed(tool)
    gate = gates(tool, policy="refuse")
    gate.forget(scope=SCOPE, keys=[SECRET_KEY], required_scopes=["tenant:30d"], probes=["flowerpot"])
    clock.advance(61)
    with pytest.raises(ErasureNotSettled, match="sentinel probe still found 1"):
        gate.recall("bike", scope=SCOPE)
    clock.advance(900)
    assert _keys(gate.recall("bike", scope=SCOPE)) == {"acme:bob:1"}


def test_a_bare_boolean_forget_is_recorded_as_intent_and_gated(gates, clock):
    tool = BareTool(clock, stale_s=0)
    _seed(tool)
    gate = gates(tool, settle_s=60)
    result = gate.forget(scope=SCOPE, keys=[SECRET_KEY], required_scopes=["tenant:30d"])
    assert result.ack.raw is True and result.ack.keys == (SECRET_KEY,) and result.ack.acknowledged_at == clock()
    assert result.classification.level == "intent" and len(result.classification.reasons) == 5
    with pytest.raises(ErasureNotSettled, match="settling interval"):
        gate.recall("bike", scope=SCOPE)
    clock.advance(60)
    assert _keys(gate.recall("flowerpot bike", scope=SCOPE)) == {"acme:bob:1"}


# -- Incident B: cached listing and lagging replica ------------------------------------------------
def test_incident_b_cached_listing_is_not_evidence(clock):
    tool = IncidentBTool(clock, lag_s=300)
    tool.write("acme:session:1", SECRET_TEXT, scope=SCOPE, subject=SECRET_SUBJECT)
    ack = tool.forget(scope=SCOPE, keys=["acme:session:1"])
    assert tool.listing("acme:session:") == ()  # the "proof" the incident relied on
    assert tool.point_read("acme:session:1") == SECRET_TEXT  # ... while the replica still serves it
    c = classify(ack, ["prefix:7d", "tenant:30d"], now=T0 + 1000)
    assert c.level == "intent"
    assert c.check("verification").error is CacheRoutedVerification
    assert c.check("scopes").error is UnenumeratedScope and c.scopes["tenant:30d"] == "unenumerated"
    with pytest.raises(CacheRoutedVerification):
        assert_deleted(ack, ["prefix:7d"], now=T0 + 1000)
    with pytest.raises(UnenumeratedScope):
        assert_deleted(
            replace(ack, verification=VerificationRead("origin", (), T0)), ["prefix:7d", "tenant:30d"], now=T0 + 1000
        )


def test_incident_b_gate_refuses_while_the_replica_lags(gates, clock):
    tool = IncidentBTool(clock, lag_s=300)
    tool.write("acme:session:1", SECRET_TEXT, scope=SCOPE, subject=SECRET_SUBJECT)
    tool.write("acme:session:2", "bob keeps his bike in the blue shed", scope=SCOPE, subject="bob")
    gate = gates(tool, settle_s=30)
    result = gate.forget(scope=SCOPE, keys=["acme:session:1"], required_scopes=["prefix:7d", "tenant:30d"])
    assert result.classification.errors() == (CacheRoutedVerification, UnenumeratedScope)

    clock.advance(120)  # past settle_s and the declared 90 s bound, still inside the replica lag
    with pytest.raises(ErasureNotSettled, match="sentinel probe"):
        gate.recall("bike", scope=SCOPE)  # the verification read of the held key still finds it
    clock.advance(200)
    assert _keys(gate.recall("blue", scope=SCOPE)) == {"acme:session:2"}


# -- a lagging replica with epochs -------------------------------------------------------------------
def test_lagging_replica_is_refused_until_it_reflects_the_erasure_epoch(gates, clock):
    tool = ReplicaTool(clock)
    _seed(tool)
    tool.replicate()
    gate = gates(tool)
    result = gate.forget(
        scope=SCOPE, keys=[SECRET_KEY], required_scopes=["tenant:30d"], required_structures=["replica"]
    )
    assert result.ack.epoch == 3
    assert [ch.name for ch in result.classification.checks if not ch.met] == ["propagation"]

    clock.advance(3600)  # the declared bound has long elapsed: evidence, yet the replica is behind
    assert classify(result.ack, ["tenant:30d"], now=clock()).evidence
    with pytest.raises(ErasureNotSettled) as exc:
        gate.recall("blue", scope=SCOPE)
    assert (exc.value.scope, exc.value.required_epoch, exc.value.applied_epoch) == (SCOPE, 3, 2)

    tool.write("acme:carol:1", "carol paints the blue door", scope=SCOPE, subject="carol")
    tool.replicate(upto=3)
    assert _keys(gate.recall("blue", scope=SCOPE)) == {"acme:bob:1"}
    assert gate.pending(SCOPE) == 0

    tool.applied, tool.replica = 2, {**tool.replica, SECRET_KEY: (SECRET_TEXT, SECRET_SUBJECT)}  # failover
    with pytest.raises(ErasureNotSettled) as exc:
        gate.recall("blue", scope=SCOPE)
    assert (exc.value.required_epoch, exc.value.applied_epoch) == (3, 2)


# -- persistence and privacy ---------------------------------------------------------------------------
def test_erasure_state_survives_a_restart(gates, clock):
    tool = IncidentATool(clock, stale_s=900)
    _seed(tool)
    first = gates(tool, settle_s=60)
    first.forget(scope=SCOPE, keys=[SECRET_KEY])
    first.close()

    clock.advance(120)
    second = gates(tool, settle_s=60)  # a new agent process: no memory but the state file
    assert second.pending(SCOPE) == 1
    with pytest.raises(ErasureNotSettled, match="sentinel probe"):
        second.recall("flowerpot", scope=SCOPE)  # the key hashes still recognise the erased item
    clock.advance(800)
    second.recall("flowerpot", scope=SCOPE)
    second.close()
    assert gates(tool).pending(SCOPE) == 0


def test_policy_refuse_still_refuses_after_a_restart(gates, clock):
    tool = IncidentATool(clock)
    _seed(tool)
    gates(tool, policy="refuse").forget(scope=SCOPE, subject=SECRET_SUBJECT)
    with pytest.raises(ErasureNotSettled, match="policy 'refuse'"):
        gates(tool, policy="refuse").recall("bike", scope=SCOPE)


def test_a_forget_that_fails_midway_leaves_the_scope_unsettled(gates, clock):
    tool = IncidentAWithEpochs(clock)
    _seed(tool)
    tool.fail_forget = True
    gate = gates(tool, policy="refuse")
    with pytest.raises(ConnectionError):
        gate.forget(scope=SCOPE, keys=[SECRET_KEY])
    assert gate.pending(SCOPE) == 1
    with pytest.raises(ErasureNotSettled):
        gate.recall("bike", scope=SCOPE)


def test_state_file_and_errors_hold_no_personal_data(gates, clock, gate_path):
    scope = "user:alice-scope-5150"
    tool = IncidentATool(clock, stale_s=900)
    tool.write(SECRET_KEY, SECRET_TEXT, scope=scope, subject=SECRET_SUBJECT)
    gate = gates(tool, settle_s=60, reveal_scopes=False)
    gate.forget(
        scope=scope, subject=SECRET_SUBJECT, keys=[SECRET_KEY], probes=["flowerpot"], required_scopes=["retention-x"]
    )
    gate.write("acme:alice:new", "alice moved the flowerpot", scope=scope, subject=SECRET_SUBJECT)  # a rewrite row
    messages = []
    for advance in (10, 100):
        clock.advance(advance)
        with pytest.raises(ErasureNotSettled) as exc:
            gate.recall("flowerpot", scope=scope)
        messages.append(str(exc.value))
        assert exc.value.scope == gate.scope_tag(scope)  # the error's context hides it too
    gate.close()
    data = b"".join(p.read_bytes() for p in gate_path.parent.iterdir() if p.name.startswith(gate_path.name))
    assert len(data) > 0
    assert gate_path.stat().st_mode & 0o077 == 0  # the HMAC secret is in there
    for secret in (SECRET_KEY, SECRET_TEXT, SECRET_SUBJECT, scope, "alice", "flowerpot"):
        assert secret.encode() not in data
        assert all(secret not in m for m in messages)
    assert all(gate.scope_tag(scope) in m for m in messages)


def test_gate_rejects_bad_configuration(gate_path, clock):
    with pytest.raises(InvalidInput):
        Gate(IncidentATool(clock), gate_path, policy="hope")
    with pytest.raises(InvalidInput):
        Gate(IncidentATool(clock), gate_path, settle_s=math.inf)
    with pytest.raises(InvalidInput):
        Gate(object(), gate_path)
    with pytest.raises(InvalidInput):
        Gate(IncidentATool(clock), gate_path, probe_k=0)


def test_gate_rejects_bad_calls(gates, clock):
    gate = gates(IncidentATool(clock))
    with pytest.raises(InvalidInput):
        gate.recall("tea", scope="")
    with pytest.raises(InvalidInput):
        gate.forget(scope=SCOPE)  # neither a subject nor keys
    with pytest.raises(InvalidInput):
        gate.forget(scope=SCOPE, keys=[""])
    assert gate.pending(SCOPE) == 0


def test_classification_to_dict_is_json_and_names_the_typed_errors():
    c = classify(replace(FULL, verification=VerificationRead("cache", (), T0 + 1)), REQUIRED, now=LATER)
    d = json.loads(json.dumps(c.to_dict()))
    assert d["level"] == "intent" and d["reasons"] == list(c.reasons)
    assert {ch["name"]: ch["error"] for ch in d["checks"]}["verification"] == "CacheRoutedVerification"


def test_a_subject_forget_without_keys_judges_hits_by_their_subject(gates, clock):
    tool = BareTool(clock, stale_s=90)  # its acknowledgement names no keys: only the subject is known
    _seed(tool)
    gate = gates(tool, settle_s=60)
    gate.forget(scope=SCOPE, subject=SECRET_SUBJECT, required_scopes=["tenant:30d"])
    clock.advance(61)
    with pytest.raises(ErasureNotSettled):  # the stale ANN still serves alice's hit: her subject gives it away
        gate.recall("blue", scope=SCOPE)
    clock.advance(30)
    assert _keys(gate.recall("blue", scope=SCOPE)) == {"acme:bob:1"}  # bob's hit is judged by its subject
    assert gate.pending(SCOPE) == 0

    tool.write("acme:note:9", "a note about the blue door", scope=SCOPE)  # no subject: cannot be judged
    gate.forget(scope=SCOPE, subject="bob", required_scopes=["tenant:30d"])
    clock.advance(91)
    with pytest.raises(ErasureNotSettled):
        gate.recall("blue", scope=SCOPE)


def test_gate_is_a_context_manager_that_closes_its_state(gate_path, clock):
    with Gate(IncidentATool(clock), gate_path, clock=clock) as gate:
        assert gate.pending(SCOPE) == 0
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        gate.pending(SCOPE)


def test_a_failed_state_write_rolls_back_and_records_nothing(gate_path):
    state = GateState(gate_path)

    def broken_keys():
        yield "k" * 32
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        state.begin("s", None, broken_keys(), T0)
    assert state.unsettled() == []
    eid = state.begin("s", None, ["k"], T0)
    with pytest.raises(RuntimeError):
        state.acknowledge(
            eid, acknowledged_at=T0, epoch=1, window_s=None, evidence_but_window=False, key_hs=broken_keys()
        )
    (e,) = state.unsettled("s")
    assert (e.acknowledged_at, e.epoch, e.key_hs) == (None, None, frozenset({"k"}))
    with pytest.raises(sqlite3.Error):
        state.settle([eid, object()], T0, "probe")  # the second id cannot be bound: the first stays unsettled
    assert [x.id for x in state.unsettled("s")] == [eid]
    state.close()


# -- EffaceTool: an efface store through the protocol -----------------------------------------------------
@pytest.fixture
def efface_tool(store, clock):
    tool = EffaceTool(store, tenant=SCOPE, purpose="support")
    tool.write(SECRET_KEY, SECRET_TEXT, scope=SCOPE, subject=SECRET_SUBJECT)
    tool.write("acme:bob:1", "bob keeps his bike in the blue shed", scope=SCOPE, subject="bob")
    return tool


def test_efface_tool_ack_is_evidence_once_paths_absorbed_and_window_elapsed(efface_tool, store, clock):
    assert isinstance(efface_tool, MemoryTool)
    ack = efface_tool.forget(scope=SCOPE, keys=[SECRET_KEY])
    assert ack.handle.startswith("efr_") and isinstance(ack.epoch, int)
    assert ack.scopes_cleared == ("support",) and ack.scopes_retained == ()
    assert {"origin", "fts", "ann", "derivations"} <= set(ack.derived_covered)
    assert ack.verification.routed_to == "origin" and ack.verification.found == ()
    c = classify(ack, ["support"], required_structures=efface_tool.derived_structures, now=clock())
    # (on PostgreSQL every read path absorbs an erasure in the forget's own transaction)
    assert [ch.name for ch in c.checks if not ch.met] == ([] if on_postgres(store) else ["propagation"])

    assert store.wait(ack.handle).settled
    clock.advance(ack.max_propagation_s)
    assert assert_deleted(ack, ["support"], required_structures=["ann", "fts"], now=clock()).evidence


def test_efface_tool_names_a_retained_scope(efface_tool, store, clock):
    store.retain(SECRET_KEY, tenant=SCOPE, subject=SECRET_SUBJECT, purpose="billing", basis="legal_hold")
    ack = efface_tool.forget(scope=SCOPE, subject=SECRET_SUBJECT)
    assert ack.scopes_cleared == ("support",) and ack.scopes_retained == ("billing",)
    clock.advance(ack.max_propagation_s)
    c = classify(ack, ["support", "billing"], now=clock())
    assert c.scopes == {"support": "cleared", "billing": "retained"}
    assert c.level == "intent" and c.check("scopes").error is None


def test_efface_tool_behind_a_gate_is_read_safe_at_acknowledgement(efface_tool, gates, clock):
    gate = gates(efface_tool, policy="refuse")
    result = gate.forget(scope=SCOPE, subject=SECRET_SUBJECT, required_scopes=["support"])
    assert efface_tool.read_epoch(SCOPE) >= result.ack.epoch
    assert SECRET_KEY not in _keys(gate.recall("blue flowerpot spare key", scope=SCOPE))
    assert gate.pending(SCOPE) == 0
    assert efface_tool.verification_read([SECRET_KEY], SCOPE).found == ()
    with pytest.raises(InvalidInput):
        efface_tool.recall("blue", scope="another-tenant")


def test_efface_tool_checks_every_key_before_forgetting_any(efface_tool, store):
    with pytest.raises(InvalidInput):
        efface_tool.forget(scope=SCOPE, keys=[SECRET_KEY, ""])
    assert store.read(SECRET_KEY, tenant=SCOPE, purpose="support") is not None
