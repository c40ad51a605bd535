"""The composition root: what a store is made of, built in one place over one origin.

:func:`assemble` takes an origin (built by the caller for its location: a directory's SQLite
file, the memory origin, later a PostgreSQL URL) and builds everything beneath the facade:
the store's secret and keyed hashes, the embedder (checked against the one the store
recorded), the derivations, the read paths (the origin's word index and this process's ANN
index, whose files live under ``ann_dir``), the propagation record, the evidence kept at
forget time, the verifier, the release rules and the compactor. :class:`efface.store.Store`
receives them as :class:`Parts` and adds only what needs the facade itself (the chokepoint,
the forget side's calls back into it). Nothing below this module builds a collaborator of
its own; every one is handed in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .derivations import Derivations
from .embed import Embedder, Lexical, for_store
from .erasure.compactor import Compactor
from .erasure.evidence import Evidence
from .erasure.fingerprint import Fingerprinter
from .erasure.ledger import SECRET_KEY, Hasher
from .erasure.propagation import Propagation
from .erasure.release import Releaser
from .erasure.verify import Verifier
from .origin.base import Origin
from .origin.capabilities import KeepsSecret, NearestVectors
from .paths.ann import VectorIndex
from .paths.base import ReadPath
from .paths.fts import FullTextIndex
from .paths.indexed import OriginVectors


@dataclass(frozen=True)
class Parts:
    """Everything a :class:`~efface.store.Store` delegates to, built by :func:`assemble`."""

    secret: bytes
    """The store's secret: every keyed hash and fingerprint is made with it."""
    hash: Hasher
    embedder: Embedder
    lexical: bool
    """Whether the embedder's vectors come from the words alone (recall: they order what the
    words miss, and put the query's own text first among equal text scores)."""
    derivations: Derivations
    fts: FullTextIndex
    ann: VectorIndex | OriginVectors
    """The vector path: the origin's own index where it has one (PostgreSQL's pgvector),
    else this process's ANN files."""
    paths: list[ReadPath]
    """Every derived read path, in the order recall and verify visit them."""
    propagation: Propagation
    evidence: Evidence
    verifier: Verifier
    releaser: Releaser
    compactor: Compactor


def assemble(
    origin: Origin,
    path: str,
    embedder: str | Embedder | None,
    *,
    clock: Callable[[], float],
    expire: Callable[[], object],
    compact_interval: float,
    ann_max_propagation_s: float,
    erase_bound_s: float,
    ann_dir: str | None = None,
    ann_instance: str = "",
) -> Parts:
    """Build a store's parts over ``origin``, for the store at ``path`` (a directory: the byte
    scan covers it). ``expire`` honours due expiries (the compactor calls it each round);
    ``ann_dir`` is where this process keeps its ANN files (default: ``path``/ann), and
    ``ann_instance`` whose they are where several processes share the origin (each its own
    files, epochs and place among the change log's consumers)."""
    if isinstance(origin, KeepsSecret):
        secret = origin.hash_secret()
    else:
        secret_hex = origin.meta_get(SECRET_KEY)
        if secret_hex is None:
            secret_hex = Hasher.new_secret()
            origin.meta_set(SECRET_KEY, secret_hex)
        secret = bytes.fromhex(secret_hex)
    hasher = Hasher(secret)
    recorded = origin.meta_get("embedder")
    chosen = for_store(embedder, recorded)
    if recorded is None:
        origin.meta_set("embedder", chosen.name)
    derivations = Derivations(origin, chosen)
    fts = FullTextIndex(origin, secret)
    ann: VectorIndex | OriginVectors
    if isinstance(origin, NearestVectors):
        ann = OriginVectors(origin, origin)
    else:
        ann = VectorIndex(
            origin,
            ann_dir or os.path.join(path, "ann"),
            chosen.dim,
            lambda tenant: "t" + hasher("tenant-file", tenant),
            max_propagation_s=ann_max_propagation_s,
            instance=ann_instance,
        )
    paths: list[ReadPath] = [fts, ann]
    fingerprinter = Fingerprinter(secret)
    propagation = Propagation(origin, paths, clock, erase_bound_s)
    evidence = Evidence(paths, fingerprinter, hasher)
    return Parts(
        secret=secret,
        hash=hasher,
        embedder=chosen,
        lexical=isinstance(chosen, Lexical) and chosen.lexical,
        derivations=derivations,
        fts=fts,
        ann=ann,
        paths=paths,
        propagation=propagation,
        evidence=evidence,
        verifier=Verifier(origin, paths, fingerprinter, path, clock),
        releaser=Releaser(derivations, evidence, hasher, propagation.max_propagation),
        compactor=Compactor(
            origin,
            paths,
            propagation,
            expire,
            interval=compact_interval,
            consumer="ann" + ("." + ann_instance if ann_instance else ""),
        ),
    )
