"""Propagation: each read path's epochs, measured times, declared bounds and alarms.

Every derived artifact reports an applied epoch (the newest erasure it has absorbed) and an
erased epoch (the newest whose bytes are gone from its files). :class:`Propagation` turns
those into the per-path states of receipts and statuses, measures how long absorption and
physical erasure took after each acknowledgement (invariant 5: bounded propagation), and
raises an alarm, logged once per erasure and path, when a path is past its bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from ..model import CopyState, PathState, Status
from ..origin.base import Origin
from ..origin.capabilities import Maintained
from ..paths.base import ReadPath

ERASE_BOUND_S = 60.0
"""Declared bound from acknowledgement to physical erasure on every path."""

SETTLED_STATES = ("absorbed", "shredded", "ledger-replay")
"""Path states after which nothing more happens to an erasure on that path (the backups
path is final at acknowledgement: its keys are destroyed or its restores replay the ledger)."""

log = logging.getLogger("efface")


class Propagation:
    """Path states, measured propagation and alarms for one store."""

    def __init__(
        self,
        origin: Origin,
        paths: Sequence[ReadPath],
        clock: Callable[[], float],
        erase_bound_s: float = ERASE_BOUND_S,
    ):
        self._origin = origin
        self._paths = list(paths)
        self._clock = clock
        self.erase_bound_s = erase_bound_s
        self._measured: dict[str, dict[str, float]] = {}
        self._alarmed: set[tuple[str, str]] = set()
        self._mu = threading.Lock()

    def max_propagation(self) -> float:
        """The receipt's declared bound: the slowest path's."""
        return max(p.max_propagation_s for p in self._paths)

    def applied_epochs(self) -> dict[str, int]:
        return {p.name: p.applied_epoch() for p in self._paths}

    def origin_files_erased(self, epoch: int) -> bool:
        """Whether the erasure at ``epoch`` is gone from the origin's own files: the origin's
        and every synchronous path's (they live in those files) erased epochs reached it."""
        if self._origin_erased(epoch) < epoch:
            return False
        return all(p.erased_epoch() >= epoch for p in self._paths if p.synchronous)

    def _origin_erased(self, epoch: int) -> int:
        """The origin's erased epoch for the erasure at ``epoch`` (a maintained origin may owe
        that erasure alone more work: the later ones it proved stay erased)."""
        o = self._origin
        return o.erased_epoch_for(epoch) if isinstance(o, Maintained) else o.erased_epoch()

    def erased_epochs(self) -> dict[str, int]:
        """Per path (the origin included), the newest epoch whose erased bytes are gone."""
        out = {"origin": self._origin.erased_epoch()}
        out.update({p.name: p.erased_epoch() for p in self._paths})
        return out

    def paths(self, epoch: int) -> dict[str, PathState]:
        """Every read path's state for an erasure at ``epoch``, now."""
        erased = {"origin": self._origin_erased(epoch)}
        erased.update({p.name: p.erased_epoch() for p in self._paths})
        with self._mu:
            m = {k: dict(v) for k, v in self._measured.items()}
        states = {
            "origin": PathState(
                "absorbed",
                self._origin.current_epoch(),
                0.0,
                True,
                erased["origin"],
                0.0,
                m.get("origin", {}).get("erase"),
            )
        }
        for p in self._paths:
            applied = p.applied_epoch()
            states[p.name] = PathState(
                "absorbed" if applied >= epoch else "pending",
                applied,
                p.max_propagation_s,
                True,
                erased.get(p.name, 0),
                m.get(p.name, {}).get("absorb"),
                m.get(p.name, {}).get("erase"),
            )
        return states

    def pending_deletions(self) -> int:
        lagging = [p.applied_epoch() for p in self._paths if not p.synchronous]
        return self._origin.pending_drops(min(lagging)) if lagging else 0

    def measure(self, what: str, before: dict[str, int], after: dict[str, int]) -> None:
        """Record how long the erasures a path just absorbed (or erased) took since their
        acknowledgement: the measured propagation that status reports beside the bound."""
        now = self._clock()
        for name, new in after.items():
            old = before.get(name, new)
            if new <= old:
                continue
            took = self._origin.ack_times(old, new)
            if took:
                worst = max(now - t for t in took)
                with self._mu:
                    slot = self._measured.setdefault(name, {})
                    slot[what] = round(max(slot.get(what, 0.0), worst), 6)

    def alarms(self, handle: str, epoch: int, acked: float, paths: dict[str, PathState]) -> tuple[str, ...]:
        """Paths past their declared bound for this erasure; each is logged once."""
        age = self._clock() - acked
        out = []
        for name, p in paths.items():
            if p.state not in SETTLED_STATES and age > p.max_propagation_s:
                out.append(
                    f"{name}: not absorbed {age:.1f} s after the acknowledgement (bound {p.max_propagation_s:g} s)"
                )
            elif p.erased_epoch < epoch and p.state != "ledger-replay" and age > self.erase_bound_s:
                # (ledger-replay declares no bound: only the subject's last claim going, or the
                # backup files being deleted, erases those bytes; status.erased stays False.)
                out.append(
                    f"{name}: bytes not erased {age:.1f} s after the acknowledgement (bound {self.erase_bound_s:g} s)"
                )
        for alarm in out:
            slot = (handle, alarm.split(":")[0])
            with self._mu:
                fresh = slot not in self._alarmed
                self._alarmed.add(slot)
            if fresh:
                log.warning("erasure %s: %s", handle, alarm)  # the handle is random, not personal
        return tuple(out)

    def status(self, row: dict, paths: dict[str, PathState], copies: dict[str, CopyState] | None = None) -> Status:
        """The status of the erasure whose stored receipt is ``row``, given its paths and its
        copies (:func:`efface.erasure.copies.now`) now."""
        handle, epoch, body = row["handle"], row["epoch"], row["body"]
        return Status(
            handle=handle,
            epoch=epoch,
            kind=row["kind"],
            level=body["level"],
            paths=paths,
            pending_deletions=self.pending_deletions(),
            settled=all(p.state in SETTLED_STATES for p in paths.values()),
            max_propagation_s=body["max_propagation_s"],
            acknowledged_at=body["acknowledged_at"],
            counts={
                "released": len(body["released"]),
                "erased": len(body["erased"]),
                "retained": len(body["retained"]),
                "quarantined": len(body["quarantined"]),
            },
            # The store's own files; backups are outside the directory, and a backup that
            # still opens under a living key (ledger-replay) is reported by its path and by
            # verify's backups check, not waited for: nothing the compactor does changes it.
            erased=all(p.erased_epoch >= epoch for n, p in paths.items() if n != "backups"),
            alarms=self.alarms(handle, epoch, body["acknowledged_at"], paths),
            erase_bound_s=self.erase_bound_s,
            copies=copies or {},
        )
