"""schemathesis against the OpenAPI document of a real server on a loopback port: generated
bodies (valid and not) on every route, with a valid key, never get a server error (5xx)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
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


# -- hostile strings: what a schema-valid generator never draws ----------------------------------
# JSON carries a lone surrogate ("\ud800" is valid JSON, invalid Unicode) and strings far over
# every limit of the library (a key's 1 KiB, a name's 256 bytes, a text's 1 MiB, the body's
# 4 MiB); each generated body gets some of its values (or a new field) replaced by one.
_SURROGATES = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
_HOSTILE = st.one_of(
    st.tuples(st.text(max_size=8), _SURROGATES, st.text(max_size=8)).map("".join),
    st.builds(lambda c, n: c * n, st.sampled_from(["k", "é", "\u200b", "\x00"]), st.sampled_from([257, 1025, 1 << 20])),
    st.just("x" * ((4 << 20) + 1)),  # over the body limit: 413 before it is parsed
    st.lists(_SURROGATES, min_size=1, max_size=3),
    st.dictionaries(_SURROGATES, _SURROGATES, min_size=1, max_size=2),
)


@pytest.fixture(scope="module")
def hostile_api(server):
    api = schemathesis.openapi.from_url(server.url + "/openapi.json")

    @api.hook
    def flatmap_body(_ctx, body):
        if not isinstance(body, dict):
            return st.just(body)
        fields = sorted({*body, "handle", "reason", "key", "text", "subject", "tenant", "purpose", "query"})
        return st.dictionaries(st.sampled_from(fields), _HOSTILE, min_size=1, max_size=3).map(
            lambda bad: {**body, **bad}
        )

    return api


hostile_schema = schemathesis.pytest.from_fixture("hostile_api")


@hostile_schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_route_answers_a_server_error_to_surrogates_or_oversize_strings(case, server):
    """#33: a lone surrogate in a handle or a reason reached SQLite and answered 500."""
    case.call_and_validate(headers={"Authorization": f"Bearer {server.acme_key}"}, checks=[not_a_server_error])
