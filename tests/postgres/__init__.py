"""A package, unlike the other test folders, so that its ``conftest.py`` is imported as
``postgres.conftest``: a plain folder's conftest would be imported as ``conftest`` and replace
the root one that other test modules import helpers from (``from conftest import ...``)."""
