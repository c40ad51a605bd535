"""Adapters that present memory stores through the gate's ``MemoryTool`` protocol.

Each adapter fills a forget acknowledgement only with what its store really returns or
guarantees. Third-party stores are optional extras; importing an adapter whose library is
missing raises ``InvalidInput`` saying which extra to install.
"""
