"""schemathesis against the OpenAPI document of a real server on a loopback port: generated
bodies (valid and not) on every route, with a valid key, never get a server error (5xx)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from served import Served


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("st") / "store", embedder="hashing")
    c = s.client("acme")
    c.write("n1", "a note about tea", subject="alice", purpose="support")
    c.close()
    s.acme_key = s.key("acme")
    yield s
    s.close()


@pytest.fixture(scope="module")
def api(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api")


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_route_answers_a_server_error(case, server):
    case.call_and_validate(headers={"Authorization": f"Bearer {server.acme_key}"}, checks=[not_a_server_error])
