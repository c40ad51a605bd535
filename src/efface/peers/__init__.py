"""The third-party stores efface is compared with, one module per store, and efface itself
as a peer: each module holds the store's gate adapter (a ``MemoryTool``, see
:mod:`efface.gate.protocol`) and its ``efface audit`` driver (see :mod:`efface.audit.driver`).

=================  ===================  =====================  ======================
module             adapter              audit driver           ``efface audit`` kind
=================  ===================  =====================  ======================
``chroma``         ``ChromaTool``       ``ChromaDriver``       ``chroma``
``lancedb``        ``LanceDBTool``      ``LanceDBDriver``      ``lancedb``
``qdrant``         ``QdrantTool``       ``QdrantLocalDriver``  ``qdrant``
``mem0``           ``Mem0Tool``         ``Mem0Driver``         ``mem0``
``efface_store``   ``EffaceTool``       ``EffaceDriver``       ``efface``
=================  ===================  =====================  ======================

Imports run one way: a peer module uses :mod:`efface.audit` (driver base, model),
:mod:`efface.gate` and :mod:`efface.errors`; the audit reaches a peer only through the lazy
registry :mod:`efface.audit.kinds`. Each adapter fills a forget acknowledgement only with
what its store really returns or guarantees. The third-party libraries are optional extras,
imported only when a tool or driver is built: a missing one raises ``InvalidInput`` saying
which extra to install. Importing this package imports none of them.
"""
