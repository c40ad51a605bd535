"""A real efface server for tests: uvicorn on a free loopback port in a thread, over a real
SQLite store, with a real key ring; and the ``http`` contract backend built on it.

``Served`` is one server. ``SharedServer`` is one server for a whole test module, serving
whichever store a test opened last (``Served(path, shared=...)``): starting a server costs far
more than opening a store (FastAPI builds every route's models), and the contract suite opens a
store per test; a test that opens a second store at once gets a server of its own for it.
``TenantRouter`` is what the ``http`` backend's ``open_store`` returns: contract tests use
several tenants, and a key acts for exactly one, so it holds one real :class:`efface.Client`
per tenant (a key made on first use) and sends each call through the client of the tenant
the call names (``DEFAULT_TENANT``'s when it names none).

Outside CI a server that cannot start skips the test with the reason; with ``CI=true`` it fails.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import efface
from efface.service.http import create_app
from efface.service.keys import KeyRing, key_path
from efface.service.runner import BackgroundServer

DEFAULT_TENANT = "acme"


def _start(server: BackgroundServer, *cleanup: Any) -> None:
    try:
        server.start()
    except RuntimeError as exc:
        for c in cleanup:
            c.close()
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"the test server could not start on loopback: {exc}")


class StoreSlot:
    """Store-shaped: forwards every call to the store a test put in it (``SharedServer``)."""

    def __init__(self) -> None:
        self.store: efface.Store | None = None

    def __getattr__(self, name: str) -> Any:
        store = self.__dict__.get("store")
        if store is None:
            raise efface.EffaceError("no store is being served: the test that opened it has ended")
        return getattr(store, name)


class SharedServer:
    """One server (app, key ring, uvicorn) for a test module; each test's store is put in its
    slot by ``Served(path, shared=self)`` and taken out when it closes."""

    def __init__(self, ring_path: str | os.PathLike):
        self.slot = StoreSlot()
        self.ring = KeyRing(ring_path)
        self.app = create_app(self.slot, self.ring)  # type: ignore[arg-type]
        self.server = BackgroundServer(self.app, access_log=False)
        _start(self.server, self.ring)
        self.url = self.server.url

    def close(self) -> None:
        self.server.stop()
        self.ring.close()


class Served:
    """A store, its key ring and a server over them; ``close()`` stops all three. With
    ``shared=`` the store is served by that module-wide server instead (its ring makes the
    keys), and ``close()`` closes the store only."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        access_log: bool = False,
        mcp: Any = None,
        shared: SharedServer | None = None,
        **options: Any,
    ):
        self.store = efface.open(path, **options)
        if shared is not None and shared.slot.store is not None:
            shared = None  # a second store open at once in one test: it gets a server of its own
        self._shared = shared
        if shared is not None:
            shared.slot.store = self.store
            self.ring, self.app, self.server, self.url = shared.ring, shared.app, shared.server, shared.url
            return
        self.ring = KeyRing(key_path(path))
        self.app = create_app(self.store, self.ring, mcp=mcp)
        self.server = BackgroundServer(self.app, access_log=access_log)
        _start(self.server, self.ring, self.store)
        self.url = self.server.url

    def key(self, tenant: str, label: str | None = None) -> str:
        return self.ring.create(tenant, label=label)[0]

    def client(self, tenant: str) -> efface.Client:
        return efface.Client(self.url, api_key=self.key(tenant))

    def close(self) -> None:
        if self._shared is not None:
            if self._shared.slot.store is self.store:
                self._shared.slot.store = None
            self.store.close()
            return
        self.server.stop()
        self.ring.close()
        self.store.close()


class TenantRouter:
    """Store-shaped: each method call goes through the real client of the tenant it names."""

    def __init__(self, served: Served):
        self.served = served
        self.path = served.store.path
        self._clients: dict[str, efface.Client] = {}
        self._closed = False

    def _client(self, tenant: str | None) -> efface.Client:
        if self._closed:
            raise efface.EffaceError("the served store is closed")
        tenant = tenant if isinstance(tenant, str) and tenant else DEFAULT_TENANT
        if tenant not in self._clients:
            self._clients[tenant] = self.served.client(tenant)
        return self._clients[tenant]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # internals: a served store has none to reach

        def call(*args: Any, **kwargs: Any) -> Any:
            if (name == "set_policy" and args) or (name in ("receipts", "ledger") and args):
                tenant = args[0]
            else:
                tenant = kwargs.get("tenant")
            return getattr(self._client(tenant), name)(*args, **kwargs)

        return call

    # compact and sweep are the operator's, on the server's machine (a client refuses them,
    # RemoteUnsupported): the tests, which run the server, do them there as an operator would.
    def compact(self) -> int:
        return self.served.store.compact()

    def sweep(self) -> list:
        return self.served.store.sweep()

    def stats(self, *, tenant: str | None = None) -> dict:
        # The client's stats, plus the store-wide record count that a client never shows a
        # tenant (it counts other tenants' records): read on the server, as an operator would.
        out = self._client(tenant).stats(tenant=tenant)
        assert "records" not in out
        return {**out, "records": self.served.store.stats()["records"]}

    @property
    def embedder(self) -> Any:
        return self.served.store.embedder

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for c in self._clients.values():
            c.close()
        self.served.close()

    def __enter__(self) -> TenantRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
