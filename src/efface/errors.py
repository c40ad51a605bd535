"""The errors efface raises: each one is part of the contract.

    EffaceError
     ├── InvalidInput          (also a ValueError) bad key, text, ttl, metadata ...
     │    ├── UnknownPurpose   a purpose the tenant has never written under
     │    ├── UnknownBasis     a basis outside the closed list
     │    ├── CommonIdentifier an identifier too common to name one person (.index, .rule)
     │    ├── KeyInUse         a write to a key other subjects' claims hold (.claims)
     │    └── InvalidArguments (also a TypeError) a call with an argument its method does
     │                         not take, or without one it needs
     ├── ScopeError            a forget selector that names nothing beyond the tenant
     ├── NotFound              (also a KeyError) no such handle, or no such record to retain
     ├── ErasureNotSettled     a read path is behind an erasure in the query's scope
     │                         (.scope, .required_epoch, .applied_epoch)
     ├── UnverifiableDeletion  an erasure could not be proven (.classification)
     │    ├── UnenumeratedScope        the ack enumerates scopes but misses a required one
     │    ├── CacheRoutedVerification  the verification read was not served by the origin
     │    └── UnboundedPropagation     derived structures with no finite propagation bound
     ├── StoreLocked           another process has the store open
     ├── OriginUnreachable     the database a store lives in could not be reached
     ├── StoreDamaged          origin.db fails SQLite's checks, is missing beside its
     │                         indexes, or a file of the store is of the wrong kind
     ├── StoreUnwritable       the store's files cannot be written: a read-only directory
     │                         or file system, a full disk, no permission, an I/O error
     ├── EmbedderMismatch      the store was built with another embedder
     ├── BackupCorrupt         a backup file fails authentication (altered, truncated)
     └── BackupMismatch        a backup made by another store

Messages say what happened and what the caller can do. They never echo keys, texts,
subjects or identifiers: those may be personal data. An error that carries context takes
it as keyword arguments after the message and keeps it as attributes, None when unknown.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar


class Classified(Protocol):
    """What the gate made of a forget's acknowledgement, as :class:`UnverifiableDeletion`
    carries it: the gate's :class:`~efface.gate.classify.Classification` is one. A protocol,
    so errors.py, at the bottom of the house, imports nothing of efface (not even for a type)."""

    @property
    def level(self) -> str: ...

    @property
    def reasons(self) -> tuple[str, ...]: ...


class EffaceError(Exception):
    """Base of every error efface raises on purpose."""


class InvalidInput(EffaceError, ValueError):
    """An argument is malformed; nothing was written or changed."""


class InvalidArguments(InvalidInput, TypeError):
    """A method was called with an argument it does not take (a misspelt keyword), without
    one it needs, or with too many: a TypeError too, as Python raises for such a call."""


_C = TypeVar("_C", bound=type)


def typed_calls(cls: _C) -> _C:
    """Make a wrong call of any public method of ``cls``, or of its constructor, an
    :class:`InvalidArguments` (a TypeError that is also an efface error) instead of Python's
    bare TypeError, naming the arguments it takes. Only the call's own binding is turned: a
    TypeError raised inside the method passes unchanged."""
    for name, fn in list(vars(cls).items()):
        if name != "__init__" and name.startswith("_"):
            continue
        if isinstance(fn, classmethod) and inspect.isfunction(fn.__func__):
            setattr(cls, name, classmethod(_typed_call(fn.__func__)))
        elif inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn):  # an async one stays one
            setattr(cls, name, _typed_call(fn))
    return cls


def _takes(fn: Callable[..., Any]) -> str:
    """The arguments ``fn`` takes, as its signature names them (never a value)."""
    names = []
    for p in list(inspect.signature(fn).parameters.values())[1:]:  # past self / cls
        if p.kind is p.VAR_POSITIONAL:
            names.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            names.append(f"**{p.name}")
        else:
            names.append(p.name)
    return ", ".join(names) if names else "no arguments"


def _typed_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    what = fn.__qualname__.removesuffix(".__init__")

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            tb = e.__traceback__
            if tb is None or tb.tb_next is not None:
                raise  # raised inside fn: its frame ran, so the arguments did bind
            # Python's message names the method and the argument, never a value
            raise InvalidArguments(f"{e}: {what}() takes {_takes(fn)}; see help({fn.__module__}.{what})") from None

    return call


class UnknownPurpose(InvalidInput):
    """The tenant has no record written under this purpose; likely a typo."""


class UnknownBasis(InvalidInput):
    """The basis is not one of efface's known lawful bases."""


class CommonIdentifier(InvalidInput):
    """An identifier given to ``register_subject`` cannot name one person (a single
    character, a common word, a short number, a malformed e-mail address): a forget of the
    subject would hold back or rewrite other people's records. Nothing was registered."""

    def __init__(self, message: str, *, index: int | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        """The refused identifier's position (0-based) in the list given."""
        self.rule = rule
        """Which rule refused it: ``too_short``, ``no_letter``, ``common_word``, ``not_email``
        or ``not_phone`` (see :mod:`efface.derivations.identifiers`)."""


class KeyInUse(InvalidInput):
    """A write names a key whose record other subjects hold claims on: their claims were
    made for the text it holds. Nothing was written. Write under another key, or pass
    ``replace=True`` to erase that record (with a receipt) and write the new one."""

    def __init__(self, message: str, *, claims: int | None = None) -> None:
        super().__init__(message)
        self.claims = claims
        """How many claims of other subjects hold the record."""


class ScopeError(EffaceError):
    """The selector is empty or too broad; nothing was forgotten."""


class NotFound(EffaceError, KeyError):
    """The handle or record does not exist (or is no longer live)."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class ErasureNotSettled(EffaceError):
    """A read path has not absorbed an erasure in the query's scope yet."""

    def __init__(
        self,
        message: str,
        *,
        scope: str | None = None,
        required_epoch: int | None = None,
        applied_epoch: int | None = None,
    ) -> None:
        super().__init__(message)
        self.scope = scope
        """The scope the read was refused in, as the message names it: the caller's name, or
        the gate's keyed-hash tag for it when the gate hides scope names (``reveal_scopes``)."""
        self.required_epoch = required_epoch
        """The epoch of the newest erasure in the scope, when the erasure has one."""
        self.applied_epoch = applied_epoch
        """The epoch the read path reflects, when it reports one."""


class UnverifiableDeletion(EffaceError):
    """A deletion could not be verified; fail closed."""

    def __init__(self, message: str, *, classification: Classified | None = None) -> None:
        super().__init__(message)
        self.classification = classification
        """What the gate made of the acknowledgement (each requirement, met or not), when the
        gate raised it; None for an erasure efface itself cannot prove."""


class StoreLocked(EffaceError):
    """Another process holds this store open."""


class OriginUnreachable(EffaceError):
    """The database a store lives in (``postgresql://...``) could not be reached: a wrong host
    or port, a server that is down, refused credentials. Nothing was read or written."""


class StoreDamaged(EffaceError):
    """The store's files are damaged (origin.db fails SQLite's checks, or is missing beside
    its index files): restore the store directory from a backup copy; nothing was changed."""


class StoreUnwritable(EffaceError):
    """The store's files cannot be written (a read-only directory or file system, a full
    disk, no permission, a disk I/O error); what was not acknowledged was not written."""


class EmbedderMismatch(EffaceError):
    """The store's vectors were made by another embedder than the one asked for."""


class BackupCorrupt(EffaceError):
    """A backup file fails authentication or is malformed; nothing was restored."""


class BackupMismatch(EffaceError):
    """The backup was made by another store; only the store that made it holds its keys."""


class UnenumeratedScope(UnverifiableDeletion):
    """The acknowledgement enumerates retention scopes but not every one the data lived
    under: the union was not cleared, whatever the scopes it names say."""


class CacheRoutedVerification(UnverifiableDeletion):
    """The verification read was served by a cache, a replica or an unnamed place, not
    by the origin: an empty answer from there proves nothing."""


class UnboundedPropagation(UnverifiableDeletion):
    """The tool's derived structures may serve erased content for an unbounded time: it
    declares an infinite bound, or covers derived structures and declares none."""
