"""``python -m efface``: the same command line as the ``efface`` script."""

from .cli import main

main()
