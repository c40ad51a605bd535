"""Running the HTTP app under uvicorn: in the foreground (``efface serve``) or in a background
thread on a free loopback port (tests, docs, the benchmark, a notebook).

Both configure uvicorn the same way: its access log keeps method, path and status only (paths
carry no data, and query strings are dropped), and the server's own errors are logged by type.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import uvicorn

from .edges import filter_access_log

SWITCH_INTERVAL_S = 0.001
"""The interpreter's GIL switch interval while ``efface serve`` runs (Python's default: 5 ms).
A recall gives the GIL up at every SQLite step and, while another thread runs Python (the
event loop, a forget, the compactor), waits up to one interval to get it back, several times
per recall: 1 ms cut a recall's p99 beside one busy thread from 96 to 55 ms
(docs/benchmarks-history.md, "Served recall's tail"). Set for the server process only; an embedding
application keeps its own setting."""


KEEP_ALIVE_S = 75
"""How long the server keeps an idle connection open. Longer than a client keeps one
(:data:`efface.service.client.KEEP_ALIVE_S`): with both at 5 s (uvicorn's and httpx's
defaults), a request sent as the server closed the idle connection failed as ``Unreachable``
(once in 3,900 requests of the load test, clients paced at one request a second)."""


def serving_interpreter() -> None:
    """Tune this process's interpreter for serving (:data:`SWITCH_INTERVAL_S`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def uvicorn_config(app: Any, host: str = "127.0.0.1", port: int = 0, *, access_log: bool = True) -> uvicorn.Config:
    """A uvicorn configuration for the efface app (the access log filtered)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        access_log=access_log,
        log_level="info",
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    filter_access_log(app)  # after the Config, which (re)configures uvicorn's loggers
    return config


class BackgroundServer:
    """uvicorn serving ``app`` in a daemon thread; ``url`` is known once ``start`` returns.

    ``with BackgroundServer(app) as server: efface.open(server.url, api_key=...)``
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, access_log: bool = True) -> None:
        self.server = uvicorn.Server(uvicorn_config(app, host, port, access_log=access_log))
        # uvicorn installs no signal handlers outside the main thread: stop() ends it.
        self._thread = threading.Thread(target=self.server.run, name="efface-http", daemon=True)
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the efface HTTP server did not start (is the port free?)")
            time.sleep(0.01)
        sockets = [s for srv in self.server.servers for s in srv.sockets]
        self.port = sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
