"""The ``efface`` command line, as a package.

* :mod:`.app`: the click group and the commands, and the one place library errors become
  exit codes;
* :mod:`.render`: the tables for people, shared by the commands and the demo;
* :mod:`.audit`: the ``efface audit`` command (the audit itself is :mod:`efface.audit`);
* :mod:`.demo`: ``efface demo``, the incidents of DESIGN.md replayed.

Imports run one way: ``app`` -> ``audit``, ``demo`` -> ``render``; ``demo`` never imports
``app``. ``efface.cli:main`` is the console script's entry point.
"""

from .app import cli, main

__all__ = ["cli", "main"]
