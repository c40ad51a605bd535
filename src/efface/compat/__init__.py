"""Drop-in faces of efface for agent frameworks.

* :mod:`efface.compat.langgraph`: :class:`~efface.compat.langgraph.EffaceStore`, a LangGraph
  ``BaseStore`` (needs the ``efface[langgraph]`` extra).
* :mod:`efface.compat.mem0`: :class:`~efface.compat.mem0.Memory`, mem0's ``Memory`` API
  (needs nothing beyond efface; it never imports mem0).
* :mod:`efface.compat.openai_agents`: :class:`~efface.compat.openai_agents.EffaceSession`, an
  OpenAI Agents SDK session (``efface[openai-agents]``).
* :mod:`efface.compat.adk`: :class:`~efface.compat.adk.EffaceMemoryService`, a Google ADK
  memory service, registered as ``efface://`` (``efface[adk]``).
* :mod:`efface.compat.llamaindex`: :class:`~efface.compat.llamaindex.EffaceVectorStore`, a
  LlamaIndex vector store (``efface[llamaindex]``).
* :mod:`efface.compat.pydantic_ai`: :class:`~efface.compat.pydantic_ai.EffaceToolset`, Pydantic
  AI memory tools whose ``forget`` returns the receipt, and its ``ConversationStore``
  (``efface[pydantic-ai]``).
* :mod:`efface.compat.crewai`: :class:`~efface.compat.crewai.EffaceStorage`, a CrewAI memory
  storage backend (``efface[crewai]``).

All talk to efface only through the public :class:`efface.Store` methods, so they work the
same over an embedded store and over anything with the same methods. None is imported by
``import efface``.
"""
