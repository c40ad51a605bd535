"""efface as a service: API keys bound to one tenant each, the HTTP API and the MCP server.

Interfaces only parse, call the library and render; behaviour lives in :class:`efface.Store`.
"""
