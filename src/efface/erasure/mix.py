"""The keyed hash of a fingerprint window: its secret multipliers and its non-linear finalisation.

Hash. For the words ``a, b`` of a window, ``h = a*K1 + b*K2 mod 2**64`` (``a*K0`` for an
8-byte window) with secret odd multipliers, then a keyed non-linear finalisation. Without
the store's secret a fingerprint says nothing about the bytes; with it, short windows
could be guessed, which is why fingerprints live only in the origin beside the secret and
are discarded as soon as the erasure is proven.

The finalisation is a bijection of 64-bit words, and :func:`unmix` inverts it: the scanner's
prefilter (:mod:`.bytescan`) looks at a window's keyed sum before the mix.
"""

from __future__ import annotations

import hashlib

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def window_keys(secret: bytes) -> np.ndarray:
    raw = hashlib.blake2b(b"efface-fingerprint-keys", key=secret[:64], digest_size=48).digest()
    k = np.frombuffer(raw, dtype="<u8").copy()
    k[:3] |= np.uint64(1)  # odd multipliers are invertible mod 2**64: no window is lost
    return k


def mix(x: np.ndarray, k3: np.uint64, k4: np.uint64) -> np.ndarray:
    """Keyed finalisation (two splitmix64 rounds around secret offsets), in place."""
    x ^= k3
    for _ in range(1):
        x ^= x >> _S30
        x *= _M1
        x ^= x >> _S27
        x *= _M2
        x ^= x >> _S31
        x += k4
    return x


_INV1 = np.uint64(pow(int(_M1), -1, 1 << 64))
_INV2 = np.uint64(pow(int(_M2), -1, 1 << 64))


def _unshift(y: np.ndarray, r: int) -> np.ndarray:
    """The inverse of ``x ^ (x >> r)`` on 64-bit words."""
    x = y.copy()
    for _ in range(64 // r):
        x = y ^ (x >> np.uint64(r))
    return x


def unmix(h: np.ndarray, k3: np.uint64, k4: np.uint64) -> np.ndarray:
    """The inverse of :func:`mix` (every step is a bijection of 64-bit words): the scanner's
    prefilter looks at the linear sum of a window's words before it is mixed, so the mix is
    computed only for the few windows that pass."""
    x = h - k4
    x = _unshift(x, 31)
    x *= _INV2
    x = _unshift(x, 27)
    x *= _INV1
    x = _unshift(x, 30)
    x ^= k3
    return x
