"""The key-encryption key file (:mod:`.keys`): a small JSON document holding the KEK (two
during a rotation), the name key (:mod:`.names`) and the hash secret of each store that
uses the file, by store id (:mod:`.hashsecret`), read again whenever it changes and replaced atomically."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ...dirs import fsync_dir
from .errors import KeyFileMismatch, KeyFileMissing

FORMAT = "efface-kek"

_ID_LABEL = b"efface key-encryption key id v1"
_NAME_ID_LABEL = b"efface name key id v1"
_SECRET_ID_LABEL = b"efface hash secret id v1"

RETIRED_GRACE_S = 120.0
"""How long this process still opens data keys wrapped by a KEK that left the file (a
rotation's last step), for reads in a snapshot taken before the rotation committed: such a
snapshot sees the data key wrapped by the old KEK. The old KEK is then dropped from memory too;
the file, the database and every backup of them never hold it again."""


def kek_id(kek: bytes) -> str:
    """The id the database keeps for a KEK: a check value, not a way back to the key."""
    return hmac.new(kek, _ID_LABEL, hashlib.sha256).hexdigest()[:32]


def name_key_id(key: bytes) -> str:
    """The check value the database keeps for the name key."""
    return hmac.new(key, _NAME_ID_LABEL, hashlib.sha256).hexdigest()[:32]


def hash_secret_id(secret: bytes) -> str:
    """The check value the database keeps for the store's hash secret."""
    return hmac.new(secret, _SECRET_ID_LABEL, hashlib.sha256).hexdigest()[:32]


class KekFile:
    """The KEK file: a small JSON document holding one key, or two during a rotation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._keys: dict[str, bytes] = {}
        self._name_key: bytes | None = None
        self._hash_secrets: dict[str, bytes] = {}  # store id -> its hash secret
        self._left: dict[str, tuple[bytes, float]] = {}  # id -> (key, when it left the file)

    def keys(self) -> dict[str, bytes]:
        """id -> key, as the file holds them now (read again only when the file changed)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._keys, self._name_key, self._hash_secrets = None, {}, None, {}
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            held, self._name_key, self._hash_secrets = self._read()
            now = time.monotonic()
            self._left.update({i: (k, now) for i, k in self._keys.items() if i not in held})
            self._keys = held
            self._stamp = stamp
        return dict(self._keys)

    def name_key(self) -> bytes | None:
        """The file's name key (module docstring), None when the file has none (yet)."""
        self.keys()
        return self._name_key

    def hash_secret(self, store: str) -> bytes | None:
        """The hash secret of the store with id ``store`` (:mod:`.hashsecret`), None when the
        file has none for it (yet)."""
        self.keys()
        return self._hash_secrets.get(store)

    def add_hash_secret(self, store: str, secret: bytes) -> None:
        """Rewrite the file with ``secret`` as the hash secret of store ``store``, the rest kept."""
        have = self.keys()
        self.write(list(have.values()), hash_secrets={**self._hash_secrets, store: secret})

    def recently_held(self, ident: str) -> bytes | None:
        """A key that left the file less than :data:`RETIRED_GRACE_S` ago (as this process
        saw it), else None; older ones are forgotten here."""
        now = time.monotonic()
        for i in [i for i, (_k, at) in self._left.items() if now - at > RETIRED_GRACE_S]:
            del self._left[i]
        got = self._left.get(ident)
        return None if got is None else got[0]

    def _read(self) -> tuple[dict[str, bytes], bytes | None, dict[str, bytes]]:
        try:
            doc = json.loads(self.path.read_text("utf-8"))
            if doc.get("format") != FORMAT:
                raise ValueError("not an efface key file")
            keys = [base64.b64decode(k, validate=True) for k in doc["keys"]]
            named = doc.get("name_key")
            name_key = None if named is None else base64.b64decode(named, validate=True)
            hash_secrets = {str(i): base64.b64decode(v, validate=True) for i, v in doc.get("hash_secrets", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise KeyFileMismatch(f"the key file {self.path} is not an efface key-encryption key file ({e})") from None
        if not keys or any(len(k) != 32 for k in keys):
            raise KeyFileMismatch(f"the key file {self.path} holds no 256-bit key")
        if name_key is not None and len(name_key) != 32:
            raise KeyFileMismatch(f"the key file {self.path} holds a name key that is not 256 bits")
        if any(len(s) < 16 for s in hash_secrets.values()):
            raise KeyFileMismatch(f"the key file {self.path} holds a hash secret shorter than 128 bits")
        # ids are computed from the keys, never read from the file: a changed key cannot pass
        return {kek_id(k): k for k in keys}, name_key, hash_secrets

    def write(
        self, keys: Iterable[bytes], name_key: bytes | None = None, hash_secrets: dict[str, bytes] | None = None
    ) -> None:
        """Replace the file's contents atomically (a new file renamed over it, both fsynced).
        The name key and the stores' hash secrets are kept as the file held them unless given."""
        if name_key is None or hash_secrets is None:
            self.keys()  # the name key and the hash secrets as the file holds them now
            name_key = self._name_key if name_key is None else name_key
            hash_secrets = self._hash_secrets if hash_secrets is None else hash_secrets
        doc: dict[str, object] = {
            "format": FORMAT,
            "note": "efface key-encryption key: without this file the store's sealed content is lost, and so is "
            "every lookup by a subject's name, a record's key or a tenant's name. Back it up.",
            "keys": [base64.b64encode(k).decode("ascii") for k in keys],
        }
        if name_key is not None:
            doc["name_key"] = base64.b64encode(name_key).decode("ascii")
        if hash_secrets:
            doc["hash_secrets"] = {i: base64.b64encode(s).decode("ascii") for i, s in sorted(hash_secrets.items())}
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(directory)

    def create(self, key: bytes) -> bool:
        """Create the file holding ``key`` unless it exists; True when this call created it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        except OSError as e:  # no such directory, not allowed to write there, ...
            raise KeyFileMissing(
                f"the key-encryption key file {self.path} could not be created ({e.strerror}): create its directory, "
                "or name a file in a directory this process may write (it is made there on the store's first use)"
            ) from None
        os.close(fd)
        self.write([key], secrets.token_bytes(32), {})
        return True
