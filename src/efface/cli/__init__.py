"""The ``efface`` command line, as a package.

* :mod:`.base`: the click group, the common options, and the one place library errors
  become exit codes;
* :mod:`.app`: the commands that write, read, recall, forget and follow an erasure;
* :mod:`.admin`: the ledger, certificates, quarantine, policy, compaction, backups, sweep,
  the demo and the audit; and ``main``;
* :mod:`.render`: the tables for people, shared by the commands and the demo;
* :mod:`.usage`: usage errors rewritten without the values that caused them;
* :mod:`.serve`: ``efface serve`` (HTTP API) and ``efface keys`` (API keys);
* :mod:`.audit`: the ``efface audit`` command (the audit itself is :mod:`efface.audit`);
* :mod:`.demo`: ``efface demo``, the incidents of docs/concepts.md §1 replayed;
* :mod:`.mcp`: ``efface mcp``, the MCP server (its tools are :mod:`efface.service.mcp`);
* :mod:`.gate`: ``efface gate proxy``, the gate as an MCP proxy (:mod:`efface.gate.proxy`).

Imports run one way: ``app``, ``admin`` -> ``base`` -> ``render``, ``usage``; ``demo`` imports
``render`` only. ``efface.cli:main`` is the console script's entry point.
"""

from . import app as _app  # noqa: F401  (registers its commands on the group)
from . import gate as _gate  # noqa: F401  (registers `efface gate proxy`)
from . import mcp as _mcp  # noqa: F401  (registers `efface mcp`)
from . import serve as _serve  # noqa: F401  (efface serve, efface keys)
from .admin import main
from .base import cli

__all__ = ["cli", "main"]
