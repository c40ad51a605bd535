"""``isinstance`` against a ``runtime_checkable`` protocol, remembered per object.

On Python 3.11 such a check walks the protocol's members on every call: 15-50 us each on
this machine, and a recall made about seventeen of them (its paths, its origin, its
embedder), half a millisecond of a recall's CPU. What an object offers does not change
while it lives (its class decides), so the answer is kept per object, for as long as the
object lives (a weak reference: a closed store's parts are not kept alive by it). Objects
that cannot be weakly referenced are checked each time. The caller narrows the type itself
(``typing.cast``), since a protocol cannot be passed where mypy expects a concrete class.
"""

from __future__ import annotations

import weakref

_known: weakref.WeakKeyDictionary[object, dict[type, bool]] = weakref.WeakKeyDictionary()


def capable(obj: object, proto: type) -> bool:
    """``isinstance(obj, proto)``, remembered for ``obj`` (module docstring)."""
    try:
        seen = _known.get(obj)
    except TypeError:  # not hashable, or not weakly referenceable
        return isinstance(obj, proto)
    if seen is None:
        seen = {}
        try:
            _known[obj] = seen
        except TypeError:
            return isinstance(obj, proto)
    got = seen.get(proto)
    if got is None:
        got = seen[proto] = isinstance(obj, proto)
    return got
