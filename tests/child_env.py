"""The environment a test gives an ``efface`` process it starts (``python -m efface ...``):
this process's, with its ``sys.path`` as ``PYTHONPATH`` (so the child imports the efface under
test) and UTF-8 standard streams, and without the ``EFFACE_*`` variables that would point the
child at another store or server than the test's (``EFFACE_URL``, ``EFFACE_STORE``,
``EFFACE_ORIGIN``, ``EFFACE_API_KEY``, ``EFFACE_KEK_FILE``)."""

from __future__ import annotations

import os
import sys

CLEARED = ("EFFACE_URL", "EFFACE_STORE", "EFFACE_ORIGIN", "EFFACE_API_KEY", "EFFACE_KEK_FILE")


def child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in CLEARED:
        env.pop(name, None)
    return env
