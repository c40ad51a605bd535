"""The gate an agent puts in front of any memory tool (docs/concepts.md §5).

``Gate.forget`` records the erasure durably, calls the tool and classifies its
acknowledgement. ``Gate.recall`` in a scope with an unsettled erasure answers only once the
erasure is settled, and otherwise raises :class:`~efface.errors.ErasureNotSettled`. It never
drops suspicious hits from a result and returns the rest (docs/concepts.md §4, invariant 2): it refuses.

An erasure settles in one of three ways, tried in this order:

- **epoch**: the acknowledgement carried an epoch and the tool has ``read_epoch(scope)``;
  the erasure settles when the tool's reads reflect that epoch, and until then recall raises
  naming both epochs. This is the only way for such tools: the policy does not apply. The
  check outlives settlement: whenever the tool's read epoch falls behind the newest erasure
  recorded in the scope (a failover to a stale replica), recall there raises again.
- **evidence**: the acknowledgement met every requirement of evidence but the elapsed
  propagation window (see :mod:`.classify`), and that window has now elapsed.
- **probe** (policy ``"probe"``, the default): the settling interval (``settle_s``, or the
  tool's declared bound if longer) has passed since the acknowledgement, and sentinel probes
  come back clean. With policy ``"refuse"`` such a scope stays refused (until
  :meth:`Gate.release`), and the error says so.

A **sentinel probe** is a read that could return an erased item, checked for one:

- the recall being gated: its hits are exactly what would leave, so it always is one;
- the extra probe queries given to ``forget(probes=...)``, recalled in the scope;
- ``tool.verification_read(keys, scope)`` when the tool has one.

A hit is erased when the keyed hash of its key is among the erasure's keys (the keys given
to ``forget`` and those the acknowledgement lists), unless the agent wrote that key again
through the gate with exactly that text; for a subject forget without keys, when the keyed
hash of its ``metadata["subject"]`` is the subject's. A hit the gate cannot judge (no keys
known and no subject in its metadata) counts as found: fail closed. Probe queries and keys
are held in memory only (they may be personal data), so after a restart the recall itself is
the probe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ErasureNotSettled, InvalidInput
from .classify import Classification, _as_ack, _names, classify, finite_seconds, seconds
from .protocol import ForgetAck, MemoryTool, ToolHit
from .state import Erasure, GateState

POLICIES = ("probe", "refuse")
"""What the gate does in a scope whose tool reports no epoch: probe, or refuse."""


@dataclass(frozen=True)
class ForgetResult:
    """What ``Gate.forget`` returns: the tool's acknowledgement and what it proves."""

    ack: ForgetAck
    classification: Classification
    erasure_id: int | None = None
    """The erasure's id in the gate's state file (for :meth:`Gate.erasure`)."""


class Gate:
    """A memory tool behind a gate whose erasure state lives in ``state_path``.

    ``policy``: ``"probe"`` or ``"refuse"`` for scopes whose tool reports no epoch.
    ``settle_s``: the least time between an acknowledgement and a probe that may settle it.
    ``probe_k``: how many hits each extra probe query asks for.
    ``reveal_scopes``: name scopes in error messages (set False when scope names are personal
    data, e.g. one namespace per user: messages then name a scope by a keyed-hash tag, which
    :meth:`scope_tag` gives for a scope)."""

    def __init__(
        self,
        tool: MemoryTool,
        state_path: str | os.PathLike,
        *,
        policy: str = "probe",
        settle_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        probe_k: int = 20,
        reveal_scopes: bool = True,
    ):
        if policy not in POLICIES:
            raise InvalidInput(f"policy must be one of {', '.join(POLICIES)}")
        if finite_seconds(settle_s) is None:
            raise InvalidInput("settle_s must be a finite number of seconds, 0 or more")
        if isinstance(probe_k, bool) or not isinstance(probe_k, int) or probe_k < 1:
            raise InvalidInput("probe_k must be a positive integer")
        if not all(callable(getattr(tool, m, None)) for m in ("write", "recall", "forget")):
            raise InvalidInput("the tool must have write, recall and forget (see efface.gate.MemoryTool)")
        self.tool = tool
        self.policy = policy
        self.settle_s = float(settle_s)
        self.probe_k = probe_k
        self.reveal_scopes = reveal_scopes
        self._clock = clock
        self._state = GateState(state_path)
        # Per erasure id: the probe queries and keys of this process's forgets. Never persisted.
        self._held: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    # -- hashing and naming ----------------------------------------------------------------
    def _scope_h(self, scope: str) -> str:
        if not isinstance(scope, str) or not scope:
            raise InvalidInput("scope must be a non-empty string")
        return self._state.hash("scope", scope)

    def scope_tag(self, scope: str) -> str:
        """How error messages name ``scope`` when ``reveal_scopes`` is False."""
        return "#" + self._scope_h(scope)[:8]

    def _label(self, scope: str) -> str:
        return f"scope '{scope}'" if self.reveal_scopes else f"scope {self.scope_tag(scope)}"

    def _not_settled(
        self, scope: str, why: str, *, required: int | None = None, applied: int | None = None
    ) -> ErasureNotSettled:
        return ErasureNotSettled(
            f"recall refused in {self._label(scope)}: {why}",
            scope=scope if self.reveal_scopes else self.scope_tag(scope),
            required_epoch=required,
            applied_epoch=applied,
        )

    # -- the tool's operations, gated ------------------------------------------------------
    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        """Write through the tool. Writing a key again after an unsettled forget of it is
        remembered (as hashes), so that recalling the new text is not taken for the old."""
        scope_h = self._scope_h(scope)
        self.tool.write(key, text, scope=scope, subject=subject, metadata=metadata)
        key_h = self._state.hash("key", scope, key)
        subject_h = None if subject is None else self._state.hash("subject", scope, subject)
        if any(
            key_h in e.key_hs or (subject_h is not None and subject_h == e.subject_h)
            for e in self._state.unsettled(scope_h)
        ):
            self._state.add_rewrite(scope_h, key_h, self._state.hash("text", scope, text))

    def forget(
        self,
        *,
        scope: str,
        subject: str | None = None,
        keys: Sequence[str] | None = None,
        required_scopes: Iterable[str] = (),
        required_structures: Iterable[str] = (),
        probes: Iterable[str] = (),
    ) -> ForgetResult:
        """Forget through the tool and classify its acknowledgement (see :func:`classify`
        for ``required_scopes`` and ``required_structures``). ``probes``: recall queries
        that would find the erased items, kept in memory for the sentinel probes.

        The erasure is on disk before the tool is called and its acknowledgement before this
        returns; if the tool raises, the erasure stays recorded and unsettled."""
        keys = _names(keys or (), "keys")
        probes = _names(probes, "probes")
        if subject is None and not keys:
            raise InvalidInput("forget needs a subject or keys")
        scope_h = self._scope_h(scope)
        subject_h = None if subject is None else self._state.hash("subject", scope, subject)
        eid = self._state.begin(scope_h, subject_h, [self._state.hash("key", scope, k) for k in keys], self._clock())
        self._held[eid] = (probes, keys)
        ack = _as_ack(self.tool.forget(scope=scope, subject=subject, keys=list(keys) or None))
        if not ack.scope:
            ack = replace(ack, scope=scope, keys=ack.keys or keys)
        if not ack.acknowledged_at:
            ack = replace(ack, acknowledged_at=self._clock())  # the time the gate received it
        c = classify(ack, required_scopes, required_structures=required_structures, now=self._clock())
        window = finite_seconds(ack.max_propagation_s)
        epoch = ack.epoch if isinstance(ack.epoch, int) and not isinstance(ack.epoch, bool) else None
        self._state.acknowledge(
            eid,
            acknowledged_at=ack.acknowledged_at,
            epoch=epoch,
            window_s=window,
            evidence_but_window=window is not None and all(ch.met for ch in c.checks if ch.name != "propagation"),
            key_hs=[self._state.hash("key", scope, k) for k in ack.keys],
        )
        self._held[eid] = (probes, tuple(dict.fromkeys((*keys, *ack.keys))))
        return ForgetResult(ack, c, eid)

    def recall(self, query: str, *, scope: str, k: int = 10) -> list[ToolHit]:
        """Recall through the tool, once every erasure in ``scope`` is settled; otherwise
        raise :class:`ErasureNotSettled` saying what is awaited."""
        scope_h = self._scope_h(scope)
        pending = self._state.unsettled(scope_h)
        floor = self._state.floor(scope_h)
        read_epoch = getattr(self.tool, "read_epoch", None)
        applied = read_epoch(scope) if callable(read_epoch) and (pending or floor is not None) else None
        # Checked on every recall, settled or not: a failover to a replica that is behind
        # an erasure already settled would otherwise serve it again.
        if applied is not None and floor is not None and applied < floor:
            raise self._not_settled(
                scope,
                f"an erasure there has epoch {floor} and the tool's reads reflect epoch {applied}; "
                "retry once the tool has caught up",
                required=floor,
                applied=applied,
            )
        if not pending:
            return list(self.tool.recall(query, scope=scope, k=k))
        now = self._clock()
        by_epoch = [e for e in pending if e.epoch is not None and applied is not None]
        self._settle(by_epoch, now, "epoch")
        rest = [e for e in pending if e not in by_epoch]
        if not rest:
            return list(self.tool.recall(query, scope=scope, k=k))

        ways: dict[int, str] = {}
        for e in rest:
            acked = e.acknowledged_at if e.acknowledged_at is not None else e.requested_at
            if (
                e.evidence_but_window
                and e.acknowledged_at is not None
                and e.window_s is not None
                and now >= acked + e.window_s
            ):
                ways[e.id] = "evidence"
            elif self.policy == "refuse":
                raise self._not_settled(
                    scope,
                    "an erasure there is unsettled, the tool reports no epoch and its acknowledgement was "
                    "not evidence; policy 'refuse' keeps this scope closed (release it with "
                    "Gate.release once the erasure is verified some other way)",
                )
            elif now < self.probes_from(e):
                left = self.probes_from(e) - now
                raise self._not_settled(
                    scope,
                    f"an erasure there is settling and the tool reports no epoch; sentinel probes run "
                    f"after the settling interval ({seconds(left)} s left)",
                )
            else:
                ways[e.id] = "probe"
        hits = list(self.tool.recall(query, scope=scope, k=k))
        self._probe(scope, scope_h, rest, hits)
        for way in ("evidence", "probe"):
            self._settle([e for e in rest if ways[e.id] == way], now, way)
        return hits

    def _probe(self, scope: str, scope_h: str, erasures: list[Erasure], hits: list[ToolHit]) -> None:
        """Raise unless every sentinel probe for ``erasures`` comes back clean."""
        probes = tuple(dict.fromkeys(q for e in erasures for q in self._held.get(e.id, ((), ()))[0]))
        results = [hits] + [list(self.tool.recall(q, scope=scope, k=self.probe_k)) for q in probes]
        rewrites = self._state.rewrites(scope_h)
        found = sum(self._erased(scope, erasures, rewrites, h) for r in results for h in r)
        verification_read = getattr(self.tool, "verification_read", None)
        keys = tuple(dict.fromkeys(key for e in erasures for key in self._held.get(e.id, ((), ()))[1]))
        if callable(verification_read) and keys:
            found += len(verification_read(keys, scope).found)
        if found:
            raise self._not_settled(
                scope,
                f"a sentinel probe still found {found} erased item(s) or item(s) the gate cannot judge; "
                "the erasure has not settled in this tool (nothing is filtered: retry later)",
            )

    def _erased(self, scope: str, erasures: list[Erasure], rewrites: set[tuple[str, str]], hit: ToolHit) -> bool:
        """True when ``hit`` is an erased item, or one the gate cannot judge."""
        key_h = self._state.hash("key", scope, hit.key)
        if (key_h, self._state.hash("text", scope, hit.text)) in rewrites:
            return False
        subject = (hit.metadata or {}).get("subject")
        subject_h = self._state.hash("subject", scope, subject) if isinstance(subject, str) else None
        for e in erasures:
            if key_h in e.key_hs:
                return True
            if e.subject_h is not None:
                if subject_h == e.subject_h:
                    return True
                if subject_h is None and not e.key_hs:  # nothing to recognise it by
                    return True
        return False

    def _settle(self, erasures: list[Erasure], now: float, by: str) -> None:
        self._state.settle([e.id for e in erasures], now, by)
        for e in erasures:
            self._held.pop(e.id, None)

    # -- inspection and overrides ------------------------------------------------------------
    def pending(self, scope: str) -> int:
        """How many erasures in ``scope`` are not settled yet."""
        return len(self._state.unsettled(self._scope_h(scope)))

    def unsettled(self, scope: str) -> list[Erasure]:
        """The erasures in ``scope`` not settled yet, oldest first."""
        return self._state.unsettled(self._scope_h(scope))

    def unsettled_tags(self) -> set[str]:
        """The :meth:`scope_tag` of every scope with an unsettled erasure (names are not kept)."""
        return {"#" + e.scope_h[:8] for e in self._state.unsettled()}

    def erasure(self, erasure_id: int) -> Erasure | None:
        """One recorded erasure as the state file keeps it (hashes only), settled or not."""
        return self._state.get(erasure_id)

    def probes_from(self, erasure: Erasure) -> float:
        """The earliest time sentinel probes may settle ``erasure`` (the settling interval, or
        the tool's declared bound if longer, after its acknowledgement or its request)."""
        acked = erasure.acknowledged_at if erasure.acknowledged_at is not None else erasure.requested_at
        return acked + max(self.settle_s, erasure.window_s or 0.0)

    def settle_verified(self, erasure_id: int) -> None:
        """Mark one erasure settled on evidence the caller checked with the tool itself (a
        store's own verification of its receipt), recorded as ``verified``."""
        erasure = self._state.get(erasure_id)
        if erasure is not None and erasure.settled_at is None:
            self._settle([erasure], self._clock(), "verified")

    def release(self, scope: str) -> int:
        """Mark every unsettled erasure in ``scope`` settled by decision, not by proof
        (recorded as ``released``). Returns how many. For policy ``refuse``, once the caller
        has verified the erasure some other way."""
        erasures = self._state.unsettled(self._scope_h(scope))
        self._settle(erasures, self._clock(), "released")
        return len(erasures)

    def close(self) -> None:
        """Close the state file (the tool is the caller's to close)."""
        self._state.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
