"""The key-encryption keys (KEKs) of a PostgreSQL store: the operator's file checked against
the database, the data keys wrapped and unwrapped under them, and the KEK's rotation
(docs/concepts.md §9). :class:`KekRing` is the half of :class:`.keys.Keys` that deals with
the file; the per-subject data keys and what they seal are :mod:`.keys`'s.

**The KEK never enters the database.** It is read from a file the operator names
(``--kek-file`` or ``EFFACE_KEK_FILE``) and that every efface server of the store reads. The
database keeps only each KEK's *id*, a check value computed from the key (HMAC-SHA256 of a
fixed label under the key): enough to tell the right file from a wrong one, useless to
recover the key. The first server to open a store with no KEK registered creates the file
(mode 0600) and warns (:class:`.errors.KeyFileCreated`) that it must be backed up. After that,
a missing file is :class:`.errors.KeyFileMissing` and a file without the database's current
KEK is :class:`.errors.KeyFileMismatch`: never a silent new key, which would make every
sealed value unreadable.

**Rotation** makes the wrapped copies of destroyed data keys useless, wherever they lie
(:mod:`.keys`): a new KEK is added to the file (the file then holds both), live data keys are
re-wrapped under it in batches, one transaction each, then the old KEK is retired in the
database and removed from the file. Any step may be interrupted; the next
:meth:`KekRing.rotate` resumes it.

**The name key.** The file holds one more secret beside the KEK(s): the *name key*, under
which the origin makes the keyed hashes that stand in the database for subject names and
record keys (:meth:`KekRing.name_h`). It never enters the database either (``meta`` keeps its
check value, ``name_key_id``), and a rotation keeps it: rotating it would change every lookup
hash. A file written before it existed gets one at the next open (the file is rewritten,
under :data:`KEYS_LOCK`); a file without the one the database names is
:class:`.errors.KeyFileMismatch`.

**The hash secret**, under which every tenant id, subject hash and fingerprint is made, is in
the file too (:mod:`.hashsecret`): derived from the name key and the store's id, or, for a
store whose older database held it in ``meta``, moved into the file as it was. The database
keeps only its check value, a rotation keeps it, and a file that does not give the one the
database names is :class:`.errors.KeyFileMismatch`. Losing the file therefore loses more than the sealed content:
no tenant, subject or record key can be found by its name any more.

Every server reloads the file when it changes (checked by a ``stat`` before each use), so a
rotation finished by one server takes the old KEK out of the others' memory at their next
use. What the file system keeps of the file's old contents after the rename that replaces it
is outside efface's reach: keep the file on a file system you trust (a secrets mount, tmpfs
filled from a vault), and back up each new file after a rotation.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...keyed_hash import keyed_hash
from .errors import KeyFileCreated, KeyFileMismatch, KeyFileMissing
from .hashsecret import open_hash_secret
from .kekfile import KekFile, kek_id, name_key_id
from .schema import DEFAULT_SCHEMA, check_name

if TYPE_CHECKING:
    import psycopg

ENV = "EFFACE_KEK_FILE"
"""The environment variable naming the KEK file, when ``--kek-file`` is not given."""

NONCE_LEN = 12
NAME_KEY_META = "name_key_id"
"""Meta key: the check value of the file's name key (never the key)."""
_WRAP_AAD = b"efface data key v1|"

KEK_WAIT_S = 5.0
"""How long a server waits for its copy of the KEK file to hold a KEK the database names
(rotated by another server, the file still syncing here) before :class:`KeyFileMismatch`."""
KEYS_LOCK = 0x65666661_00000002
"""Advisory lock ('effa' + 2) held by whoever registers a KEK or rewrites the file, from the
database's change to the file's rename, so no two servers write the file from different views."""
ROTATE_LOCK = 0x65666661_00000003
"""Advisory lock ('effa' + 3) held for a whole rotation: one at a time per database."""


def resolve_path(kek_file: str | os.PathLike[str] | None) -> Path:
    """The KEK file named by the option, else by :data:`ENV`; :class:`KeyFileMissing` if neither."""
    named = kek_file if kek_file is not None else os.environ.get(ENV)
    if not named:
        raise KeyFileMissing(
            f"a PostgreSQL store needs a key-encryption key file: name one with --kek-file or {ENV} "
            "(it is created on first use; back it up)"
        )
    return Path(named).expanduser()


@dataclass(frozen=True)
class Rotation:
    """What :meth:`Keys.rotate` did."""

    new_kek: str
    """The id of the KEK now current."""
    retired: tuple[str, ...]
    """Ids of the KEKs retired (destroyed in the file) by this call."""
    rewrapped: int
    """Data keys re-wrapped under the new KEK."""
    batches: int
    """Transactions the re-wrapping took."""
    covered: int
    """Destroyed data keys whose wrapped copies this rotation made useless."""


class KekRing:
    """The KEKs of one database schema and one KEK file (module docstring). :meth:`open` and
    :meth:`rotate` take an autocommit connection and manage their own transactions."""

    def __init__(self, kek_file: str | os.PathLike[str] | None, *, schema: str = DEFAULT_SCHEMA) -> None:
        self.file = KekFile(resolve_path(kek_file))
        self.schema = check_name(schema)
        self._name_key: bytes | None = None
        self._hash_secret: bytes | None = None

    # -- the KEK
    def open(self, conn: psycopg.Connection, now: float | None = None) -> str:
        """Check the file against the database (creating both on a store's first use) and
        finish a rotation's last step if it was interrupted; returns the current KEK's id."""
        if not conn.autocommit:
            raise ValueError("Keys.open() needs an autocommit connection")
        with self._file_lock(conn):
            current = self._open(conn, time.time() if now is None else now)
            self._name_key = self._open_name_key(conn)
            self._hash_secret = open_hash_secret(conn, self.file, self.schema, self._name_key, KEK_WAIT_S)
            return current

    def hash_secret(self) -> bytes:
        """The store's hash secret, from the file (:mod:`.hashsecret`), once :meth:`open` ran."""
        if self._hash_secret is None:
            raise KeyFileMissing("the store's keys are not open: open them before hashing")
        return self._hash_secret

    def _open_name_key(self, conn: psycopg.Connection) -> bytes:
        """The file's name key, checked against the one the database names; one is made
        (and the file rewritten) when neither has one yet. Called with :data:`KEYS_LOCK` held."""
        s = self.schema
        row = conn.execute(f"SELECT v FROM {s}.meta WHERE k = %s", (NAME_KEY_META,)).fetchone()
        key = self.file.name_key()
        deadline = time.monotonic() + KEK_WAIT_S
        while row is not None and (key is None or name_key_id(key) != row[0]) and time.monotonic() < deadline:
            time.sleep(0.05)  # another server added it; this host's copy may lag (see _kek)
            key = self.file.name_key()
        if row is not None:
            if key is None or name_key_id(key) != row[0]:
                raise KeyFileMismatch(
                    f"the key file {self.file.path} does not hold the name key this store's lookup hashes are made "
                    "with (another store's file, or a copy from before efface added it): name the store's current file",
                    expected=str(row[0]),
                )
            return key
        if key is None:
            key = secrets.token_bytes(32)
            try:
                self.file.write(list(self.file.keys().values()), key)
            except OSError as e:
                raise KeyFileMismatch(
                    f"the key file {self.file.path} has no name key yet and efface cannot add one ({e.strerror}): "
                    "make the file writable by this process for one start"
                ) from None
            warnings.warn(
                f"efface added a name key to {self.file.path}: back this file up again. Every server of this store "
                "must read the same file.",
                KeyFileCreated,
                stacklevel=3,
            )
        conn.execute(
            f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING", (NAME_KEY_META, name_key_id(key))
        )
        return key

    def name_h(self, kind: str, tenant: str, name: str) -> str:
        """The keyed hash (under the name key, :func:`efface.keyed_hash.keyed_hash`) that stands
        for ``name`` (a subject's name, ``kind`` 'subject'; a record key, 'key') of ``tenant`` in
        the database: equal names, equal hashes, whatever KEK is current."""
        if self._name_key is None:
            raise KeyFileMissing("the store's keys are not open: open them before a lookup")
        return keyed_hash(self._name_key, kind, tenant, name)

    @contextlib.contextmanager
    def _file_lock(self, conn: psycopg.Connection) -> Iterator[None]:
        conn.execute("SELECT pg_advisory_lock(%s)", (KEYS_LOCK,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (KEYS_LOCK,))

    def _open(self, conn: psycopg.Connection, now: float) -> str:
        s = self.schema
        with conn.transaction():
            registered = self._states(conn)
            have = self.file.keys()
            if not registered:
                if not have:
                    wrapped = conn.execute(f"SELECT count(*) FROM {s}.data_keys").fetchone()
                    if wrapped and wrapped[0]:  # pragma: no cover - keks and data_keys are written together
                        raise KeyFileMissing("the database holds data keys but no key-encryption key is registered")
                    key = secrets.token_bytes(32)
                    if self.file.create(key):
                        warnings.warn(
                            f"efface created a new key-encryption key in {self.file.path}: back this file up now. "
                            "Every server of this store must read the same file; without it the store's sealed "
                            "content cannot be read.",
                            KeyFileCreated,
                            stacklevel=2,
                        )
                    have = self.file.keys()
                current = next(iter(have))
                conn.execute(
                    f"INSERT INTO {s}.keks(kek_id, state, created_at) VALUES (%s, 'current', %s)", (current, now)
                )
                return current
            current = registered["current"]
            if not have:
                raise KeyFileMissing(
                    f"the key-encryption key file {self.file.path} does not exist, and this store's data keys are "
                    "wrapped by a key: restore the file from its backup (efface will not make a new key)"
                )
            if current not in have:
                raise KeyFileMismatch(
                    f"the key file {self.file.path} does not hold the key this store's data keys are wrapped by "
                    "(another store's file, or a copy from before a rotation): name the store's current file",
                    expected=current,
                    found=tuple(have),
                )
        self._drop_retired(conn)
        return current

    def _states(self, conn: psycopg.Connection) -> dict[str, str]:
        """state ('current', 'next') -> KEK id, for the KEKs not retired."""
        rows = conn.execute(f"SELECT state, kek_id FROM {self.schema}.keks WHERE state <> 'retired'").fetchall()
        return {str(state): str(ident) for state, ident in rows}

    def _drop_retired(self, conn: psycopg.Connection) -> tuple[str, ...]:
        """Remove from the file every KEK the database has retired (a rotation's last step);
        called with :data:`KEYS_LOCK` held."""
        have = self.file.keys()
        if len(have) < 2:
            return ()
        retired = {
            r[0]
            for r in conn.execute(
                f"SELECT kek_id FROM {self.schema}.keks WHERE state = 'retired' AND kek_id = ANY(%s)", (list(have),)
            )
        }
        if retired:
            self.file.write([k for i, k in have.items() if i not in retired])
        return tuple(sorted(retired))

    def _kek(self, kid_of_kek: str) -> bytes:
        # (a read in a snapshot from before a rotation names the KEK it retired)
        key = self.file.keys().get(kid_of_kek) or self.file.recently_held(kid_of_kek)
        deadline = time.monotonic() + KEK_WAIT_S
        while key is None and time.monotonic() < deadline:
            # Another server rotated the KEK: this host's copy of the file may lag behind
            # the database (a secrets mount that syncs); wait for it a little.
            time.sleep(0.05)
            key = self.file.keys().get(kid_of_kek)
        if key is None:
            raise KeyFileMismatch(
                f"the key file {self.file.path} does not hold the key-encryption key a data key is wrapped by",
                expected=kid_of_kek,
                found=tuple(self.file.keys()),
            )
        return key

    def _wrap(self, kek_ident: str, kid: bytes, dek: bytes) -> bytes:
        nonce = secrets.token_bytes(NONCE_LEN)
        return nonce + AESGCM(self._kek(kek_ident)).encrypt(nonce, dek, _WRAP_AAD + kid)

    def _unwrap(self, kek_ident: str, kid: bytes, wrapped: bytes) -> bytes:
        try:
            return AESGCM(self._kek(kek_ident)).decrypt(wrapped[:NONCE_LEN], wrapped[NONCE_LEN:], _WRAP_AAD + kid)
        except InvalidTag:
            raise KeyFileMismatch(
                "a data key does not open with the key-encryption key it names: the key file is not this store's",
                expected=kek_ident,
            ) from None

    # -- rotation
    def rotate(
        self,
        conn: psycopg.Connection,
        *,
        batch: int = 500,
        now: float | None = None,
        after_batch: Callable[[int], None] | None = None,
    ) -> Rotation:
        """Replace the current KEK: add a new one to the file, re-wrap every live data key
        under it, ``batch`` keys per transaction, retire the old one in the database and
        remove it from the file. Resumes an interrupted rotation. One at a time per database
        (an advisory lock). ``after_batch``: called with the batch number after each commit
        (tests interrupt a rotation with it)."""
        if not conn.autocommit:
            raise ValueError("rotate() needs an autocommit connection")
        s = self.schema
        now = time.time() if now is None else now
        self.open(conn, now)
        conn.execute("SELECT pg_advisory_lock(%s)", (ROTATE_LOCK,))
        try:
            with self._file_lock(conn):
                old, new = self._begin(conn, now)
            batches = rewrapped = 0
            while True:
                with conn.transaction():
                    rows = conn.execute(
                        f"SELECT kid, wrapped, kek_id FROM {s}.data_keys WHERE kek_id <> %s ORDER BY kid LIMIT %s "
                        "FOR UPDATE",
                        (new, batch),
                    ).fetchall()
                    self._rewrap(conn, rows, new)
                if not rows:
                    break
                batches += 1
                rewrapped += len(rows)
                if after_batch is not None:
                    after_batch(batches)
            with self._file_lock(conn):
                with conn.transaction():
                    # Writers creating a data key hold FOR SHARE on the KEK row they wrap with:
                    # this waits for them, then re-wraps anything they left under the old KEK.
                    conn.execute(f"SELECT kek_id FROM {s}.keks WHERE state = 'current' FOR UPDATE")
                    rows = conn.execute(
                        f"SELECT kid, wrapped, kek_id FROM {s}.data_keys WHERE kek_id <> %s", (new,)
                    ).fetchall()
                    self._rewrap(conn, rows, new)
                    rewrapped += len(rows)
                    covered = conn.execute(
                        f"SELECT count(*) FROM {s}.destroyed_keys d JOIN {s}.keks k USING (kek_id)"
                        " WHERE k.state = 'current'"
                    ).fetchone()
                    conn.execute(
                        f"UPDATE {s}.keks SET state = 'retired', retired_at = %s WHERE state = 'current'", (now,)
                    )
                    conn.execute(f"UPDATE {s}.keks SET state = 'current' WHERE kek_id = %s", (new,))
                # the database first, then the file: a crash between leaves the retired key in
                # the file, which the next open() or rotate() removes
                retired = self._drop_retired(conn)
            return Rotation(new, retired or (old,), rewrapped, batches, int(covered[0]) if covered else 0)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (ROTATE_LOCK,))

    def _rewrap(self, conn: psycopg.Connection, rows: list, new: str) -> None:
        for kid, wrapped, was in rows:
            dek = self._unwrap(was, bytes(kid), bytes(wrapped))
            conn.execute(
                f"UPDATE {self.schema}.data_keys SET wrapped = %s, kek_id = %s WHERE kid = %s",
                (self._wrap(new, bytes(kid), dek), new, kid),
            )

    def _begin(self, conn: psycopg.Connection, now: float) -> tuple[str, str]:
        """The (current, next) KEK ids, adding the next one to the file and the database
        unless an interrupted rotation already did; called with :data:`KEYS_LOCK` held."""
        s = self.schema
        with conn.transaction():
            states = self._states(conn)
            current = states["current"]
            have = self.file.keys()
            if "next" in states:
                if states["next"] not in have:
                    raise KeyFileMismatch(
                        f"a rotation is under way but the key file {self.file.path} lacks its new key: "
                        "name the file the rotation wrote",
                        expected=states["next"],
                        found=tuple(have),
                    )
                return current, states["next"]
            # the file first, then the database: a crash between leaves an extra key in the file,
            # which the next rotation takes as its new key
            spare = [i for i in have if i != current]
            if spare:
                new = spare[0]
            else:
                key = secrets.token_bytes(32)
                self.file.write([have[current], key])
                new = kek_id(key)
            conn.execute(f"INSERT INTO {s}.keks(kek_id, state, created_at) VALUES (%s, 'next', %s)", (new, now))
            return current, new
