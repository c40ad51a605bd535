"""Backup files with crypto-shredding: the format and its cryptography.

A backup holds every live record of the store, each encrypted so that destroying one
subject's data key (which only the origin holds) makes that subject's part of every backup
unreadable. :meth:`efface.Store.backup` and :meth:`efface.Store.restore` drive it; this
module only writes and reads the bytes.

Layout (integers big-endian)::

    MAGIC
    u32 header length, header (JSON, in clear, no personal data)
    frames: u32 length, frame            one per entry (settings, subjects, then records)
    TRAILER_TAG, 32-byte HMAC-SHA256     over every byte before it

A frame is::

    u16 wrap count, then per wrap: 16-byte kid, 12-byte nonce, u32 length, wrapped bytes
    12-byte nonce, u32 length, payload ciphertext

* The payload (a record: tenant, key, text, metadata, sources, quarantine, embedding; or a
  subject's registered identifiers; or the tenants' settings) is AES-256-GCM under a random
  per-entry key (DEK).
* The DEK is wrapped (AES-256-GCM) under the data key of every subject holding a live claim
  on the record, together with *that subject's* claims on it: a subject's claims are only
  readable with its own key, and the record stays readable while any one of them survives
  (retention is a union). A wrap is tagged by the key's random id (``kid``), never by the
  subject. Settings (policies, purposes: no personal data) are wrapped under a key derived
  from the store secret, so nothing but the header is in clear.
* Every ciphertext's associated data binds the store id, the backup id and the entry index
  (and the kid for wraps), so entries cannot be swapped between files or positions.
* The trailer's HMAC (key derived from the store secret) covers the header, so the epoch and
  ledger position that decide what a restore replays cannot be altered, nor entries dropped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import BackupCorrupt

MAGIC = b"EFFACE-BACKUP\x00\x01\n"
TRAILER_TAG = b"EFFACE-END\x00\x00"
FORMAT = 1
STORE_KID = b"\x00" * 16
"""The kid of the store-derived settings key (subject kids are random, never all zero)."""
_MAX_HEADER = 1 << 20
_MAX_FRAME = 1 << 30


@dataclass(frozen=True)
class BackupResult:
    """What :meth:`efface.Store.backup` wrote."""

    path: str
    backup_id: str
    epoch: int
    """The epoch the backup is a snapshot of."""
    ledger_seq: int
    """The ledger entry that records the backup; a restore replays every erasure after it."""
    records: int
    subjects: int
    """Subjects with a data key: the keys whose destruction shreds their part of the backup."""
    bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RestoreResult:
    """What :meth:`efface.Store.restore` did with each record of a backup."""

    backup_id: str
    epoch: int
    """The epoch of the restore's last mutation (0: nothing was written)."""
    restored: int
    """Records written back (with the claims that survive the ledger replay and expiry)."""
    shredded: int
    """Records no surviving subject key can decrypt: their subjects were forgotten."""
    replayed: int
    """Records decrypted but not restored: erased, or left with no claim, by erasures after
    the backup (the ledger replay), by TTL expiry, or held back as derived from an erasure."""
    present: int
    """Records already live in the store: restore never overwrites."""
    subjects: int = 0
    """Registered subjects whose identifiers were missing and were restored."""

    def to_dict(self) -> dict:
        return asdict(self)


def derive_key(secret: bytes, label: str) -> bytes:
    """A 256-bit key for one use, derived from the store secret (HKDF-SHA256)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"efface " + label.encode()).derive(secret)


def _aad(store_id: str, backup_id: str, index: int, kid: bytes = b"") -> bytes:
    # Unambiguous without length prefixes: the store id and backup id are hex made here, the
    # index is decimal, and only the last field (the key id) is arbitrary bytes.
    return b"\x1f".join([store_id.encode(), backup_id.encode(), str(index).encode(), kid])


def seal(
    payload: bytes, wraps: list[tuple[bytes, bytes, bytes]], *, store_id: str, backup_id: str, index: int
) -> bytes:
    """One frame: ``payload`` under a fresh DEK, the DEK wrapped under each ``(kid, key, extra)``
    (``extra``: bytes readable only with that key, e.g. its subject's claims)."""
    dek = AESGCM.generate_key(256)
    out = [struct.pack(">H", len(wraps))]
    for kid, key, extra in wraps:
        nonce = os.urandom(12)
        wrapped = AESGCM(key).encrypt(nonce, dek + extra, _aad(store_id, backup_id, index, kid))
        out += [kid, nonce, struct.pack(">I", len(wrapped)), wrapped]
    nonce = os.urandom(12)
    ct = AESGCM(dek).encrypt(nonce, payload, _aad(store_id, backup_id, index))
    out += [nonce, struct.pack(">I", len(ct)), ct]
    return b"".join(out)


def open_frame(
    frame: bytes, keys: dict[bytes, bytes], *, store_id: str, backup_id: str, index: int
) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    """Decrypt a frame with whichever of ``keys`` (kid -> key) it was wrapped under.
    Returns (payload, [(kid, extra) for every wrap opened]) or None when no key survives.
    A wrap or payload that fails authentication raises :class:`BackupCorrupt`."""
    try:
        (n,) = struct.unpack_from(">H", frame, 0)
        pos, opened, dek = 2, [], None
        for _ in range(n):
            kid, nonce = frame[pos : pos + 16], frame[pos + 16 : pos + 28]
            (length,) = struct.unpack_from(">I", frame, pos + 28)
            wrapped = frame[pos + 32 : pos + 32 + length]
            pos += 32 + length
            key = keys.get(kid)
            if key is None:
                continue  # destroyed (or never ours): this subject's part is shredded
            plain = AESGCM(key).decrypt(nonce, wrapped, _aad(store_id, backup_id, index, kid))
            dek = plain[:32]
            opened.append((kid, plain[32:]))
        nonce = frame[pos : pos + 12]
        (length,) = struct.unpack_from(">I", frame, pos + 12)
        ct = frame[pos + 16 : pos + 16 + length]
        if pos + 16 + length != len(frame) or len(nonce) != 12:
            raise BackupCorrupt("a backup entry is malformed (the file was altered or truncated); nothing was restored")
        if dek is None:
            return None
        return AESGCM(dek).decrypt(nonce, ct, _aad(store_id, backup_id, index)), opened
    except (InvalidTag, struct.error, ValueError) as exc:
        raise BackupCorrupt(
            "a backup entry fails authentication (the file was altered or truncated); nothing was restored"
        ) from exc


def encode_record(fields: dict, embedding: bytes) -> bytes:
    body = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return struct.pack(">I", len(body)) + body + embedding


def decode_record(payload: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from(">I", payload, 0)
    return json.loads(payload[4 : 4 + n]), payload[4 + n :]


class BackupWriter:
    """Writes a backup to an open binary file, MAC-ing every byte as it goes."""

    def __init__(self, f: BinaryIO, mac_key: bytes, header: dict):
        self._f = f
        self._mac = hmac.new(mac_key, digestmod=hashlib.sha256)
        head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        self._write(MAGIC + struct.pack(">I", len(head)) + head)
        self.size = len(MAGIC) + 4 + len(head)

    def _write(self, data: bytes) -> None:
        self._mac.update(data)
        self._f.write(data)

    def frame(self, frame: bytes) -> None:
        self._write(struct.pack(">I", len(frame)) + frame)
        self.size += 4 + len(frame)

    def finish(self) -> int:
        tail = TRAILER_TAG + self._mac.digest()
        self._f.write(tail)
        self.size += len(tail)
        return self.size


def read_header(path: str) -> dict:
    """The clear header of a backup file (raises :class:`BackupCorrupt` if it is not one)."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 4)
        if len(head) < len(MAGIC) + 4 or head[: len(MAGIC)] != MAGIC:
            raise BackupCorrupt("this file is not an efface backup (or its first bytes were altered)")
        (n,) = struct.unpack(">I", head[len(MAGIC) :])
        if n > _MAX_HEADER:
            raise BackupCorrupt("the backup header is malformed (the file was altered or truncated)")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except ValueError:
        raise BackupCorrupt("the backup header is malformed (the file was altered or truncated)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise BackupCorrupt(f"unsupported backup format (this efface reads format {FORMAT})")
    return header


def verify_file(path: str, mac_key: bytes) -> None:
    """Check the trailer's HMAC over the whole file before anything is decrypted."""
    size = os.path.getsize(path)
    body = size - len(TRAILER_TAG) - 32
    if body < len(MAGIC) + 4:
        raise BackupCorrupt("the backup file is truncated; nothing was restored")
    mac = hmac.new(mac_key, digestmod=hashlib.sha256)
    with open(path, "rb") as f:
        left = body
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise BackupCorrupt("the backup file is truncated; nothing was restored")
            mac.update(chunk)
            left -= len(chunk)
        tail = f.read()
    if tail[: len(TRAILER_TAG)] != TRAILER_TAG or not hmac.compare_digest(tail[len(TRAILER_TAG) :], mac.digest()):
        raise BackupCorrupt(
            "the backup file fails authentication (altered, truncated, or made by another store); nothing was restored"
        )


def frames(path: str) -> Iterator[bytes]:
    """The frames of a verified backup file, in order."""
    end = os.path.getsize(path) - len(TRAILER_TAG) - 32
    with open(path, "rb") as f:
        f.seek(len(MAGIC))
        (n,) = struct.unpack(">I", f.read(4))
        f.seek(n, os.SEEK_CUR)
        while f.tell() < end:
            (length,) = struct.unpack(">I", f.read(4))
            if length > _MAX_FRAME or f.tell() + length > end:
                raise BackupCorrupt("a backup entry is malformed (the file was altered or truncated)")
            yield f.read(length)
