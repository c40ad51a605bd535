"""``efface audit``: what does a store's delete really prove?

On a copy of a store, forget a subject or ids through the store's own API, probe every read
path it exposes, scan the bytes of every file it keeps, and place each path on the evidence
ladder of docs/concepts.md §3 (intent, unreadable, erased), with the evidence in counts and file
names. Texts and vectors of the targets stay in memory for the run; reports never hold them.
"""

from .model import AuditReport, ByteScan, Cell, FileResidue, ProbeResult, Selection, Stage, Targets
from .run import run_audit

__all__ = [
    "AuditReport",
    "ByteScan",
    "Cell",
    "FileResidue",
    "ProbeResult",
    "Selection",
    "Stage",
    "Targets",
    "run_audit",
]
