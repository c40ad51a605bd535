"""Aliases kept for the import paths the README documents: each ``efface.adapters.<x>``
re-exports the gate adapter of :mod:`efface.peers.<x>`, where the code lives beside the
store's audit driver. New code imports from :mod:`efface.peers`.

Each adapter fills a forget acknowledgement only with what its store really returns or
guarantees. Third-party stores are optional extras; building an adapter whose library is
missing raises ``InvalidInput`` saying which extra to install.
"""
