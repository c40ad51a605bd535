"""The key-encryption key file (:mod:`.keys`): a small JSON document holding the KEK (two
during a rotation) and the name key (:mod:`.names`), read again whenever it changes and
replaced atomically."""

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
from .errors import KeyFileMismatch

FORMAT = "efface-kek"

_ID_LABEL = b"efface key-encryption key id v1"
_NAME_ID_LABEL = b"efface name key id v1"

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


class KekFile:
    """The KEK file: a small JSON document holding one key, or two during a rotation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._keys: dict[str, bytes] = {}
        self._name_key: bytes | None = None
        self._left: dict[str, tuple[bytes, float]] = {}  # id -> (key, when it left the file)

    def keys(self) -> dict[str, bytes]:
        """id -> key, as the file holds them now (read again only when the file changed)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._keys, self._name_key = None, {}, None
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            held, self._name_key = self._read()
            now = time.monotonic()
            self._left.update({i: (k, now) for i, k in self._keys.items() if i not in held})
            self._keys = held
            self._stamp = stamp
        return dict(self._keys)

    def name_key(self) -> bytes | None:
        """The file's name key (module docstring), None when the file has none (yet)."""
        self.keys()
        return self._name_key

    def recently_held(self, ident: str) -> bytes | None:
        """A key that left the file less than :data:`RETIRED_GRACE_S` ago (as this process
        saw it), else None; older ones are forgotten here."""
        now = time.monotonic()
        for i in [i for i, (_k, at) in self._left.items() if now - at > RETIRED_GRACE_S]:
            del self._left[i]
        got = self._left.get(ident)
        return None if got is None else got[0]

    def _read(self) -> tuple[dict[str, bytes], bytes | None]:
        try:
            doc = json.loads(self.path.read_text("utf-8"))
            if doc.get("format") != FORMAT:
                raise ValueError("not an efface key file")
            keys = [base64.b64decode(k, validate=True) for k in doc["keys"]]
            named = doc.get("name_key")
            name_key = None if named is None else base64.b64decode(named, validate=True)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KeyFileMismatch(f"the key file {self.path} is not an efface key-encryption key file ({e})") from None
        if not keys or any(len(k) != 32 for k in keys):
            raise KeyFileMismatch(f"the key file {self.path} holds no 256-bit key")
        if name_key is not None and len(name_key) != 32:
            raise KeyFileMismatch(f"the key file {self.path} holds a name key that is not 256 bits")
        # ids are computed from the keys, never read from the file: a changed key cannot pass
        return {kek_id(k): k for k in keys}, name_key

    def write(self, keys: Iterable[bytes], name_key: bytes | None = None) -> None:
        """Replace the file's contents atomically (a new file renamed over it, both fsynced).
        The name key is kept as the file held it unless ``name_key`` gives one."""
        if name_key is None:
            self.keys()  # the name key as the file holds it now
            name_key = self._name_key
        doc = {
            "format": FORMAT,
            "note": "efface key-encryption key: without this file the store's sealed content is lost. Back it up.",
            "keys": [base64.b64encode(k).decode("ascii") for k in keys],
        }
        if name_key is not None:
            doc["name_key"] = base64.b64encode(name_key).decode("ascii")
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
        os.close(fd)
        self.write([key], secrets.token_bytes(32))
        return True
