"""The HTTP API end to end, through real HTTP on a loopback port: status codes, the JSON
error envelope, the limits, the OpenAPI document, the HTML certificate, and logs that carry
none of the texts, queries, keys, identifiers or tenant names a run used."""

from __future__ import annotations

import logging

import httpx
import pytest

from efface.errors import InvalidInput
from efface.service.http import create_app
from efface.service.runner import BackgroundServer

TEXT = "Bartholomew Quince keeps his spare key under the blue pot"
QUERY = "where is the spare key of Bartholomew"
SUBJECT = "bartholomew-quince"
IDENT = "Bartholomew Quince"
TENANT = "tenant-zanzibar"


def post(served, route, body, key=None, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(served.url + route, json=body, headers=headers, **kw)


def test_write_read_recall_forget_wait_verify_certificate(served):
    key = served.key(TENANT)
    r = post(served, "/v1/write", {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
    assert r.status_code == 200 and r.json()["epoch"] == 1
    r = post(served, "/v1/read", {"key": "k1", "purpose": "support"}, key)
    assert r.json()["found"] and r.json()["memory"]["text"] == TEXT
    r = post(served, "/v1/recall", {"query": QUERY, "purpose": "support"}, key)
    assert [h["key"] for h in r.json()] == ["k1"]
    r = post(served, "/v1/forget", {"subject": SUBJECT}, key)
    receipt = r.json()
    assert r.status_code == 200 and receipt["level"] == "intent" and receipt["erased"] == ["k1"]
    st = post(served, "/v1/wait", {"handle": receipt["handle"], "timeout": 20}, key).json()
    assert st["erased"] is True
    v = post(served, "/v1/verify", {"handle": receipt["handle"]}, key).json()
    assert v["level"] == "erased", [c for c in v["checks"] if c["outcome"] != "pass"]
    cert = post(served, "/v1/certificate", {"handle": receipt["handle"]}, key)
    assert cert.headers["content-type"].startswith("application/json") and cert.json()["level"] == "erased"
    html = httpx.post(
        served.url + "/v1/certificate",
        json={"handle": receipt["handle"]},
        headers={"Authorization": f"Bearer {key}", "Accept": "text/html"},
    )
    assert html.headers["content-type"].startswith("text/html") and "<html" in html.text
    html2 = post(served, "/v1/certificate.html", {"handle": receipt["handle"]}, key)
    assert html2.headers["content-type"].startswith("text/html")
    assert post(served, "/v1/read", {"key": "k1", "purpose": "support"}, key).json() == {"found": False, "memory": None}


@pytest.mark.parametrize(
    ("route", "body", "status", "kind"),
    [
        ("/v1/read", {"key": "k1", "purpose": "nosuch"}, 400, "UnknownPurpose"),
        ("/v1/write", {"key": "k", "text": "t", "subject": "s", "purpose": "p", "basis": "whim"}, 400, "UnknownBasis"),
        ("/v1/write", {"key": "", "text": "t", "subject": "s", "purpose": "p"}, 400, "InvalidInput"),
        ("/v1/write", {"key": 5, "text": "t", "subject": "s", "purpose": "p"}, 400, "InvalidInput"),
        ("/v1/write", {"text": "t"}, 422, "InvalidInput"),
        ("/v1/write", {"key": "k", "text": "t", "subject": "s", "purpose": "p", "colour": "red"}, 422, "InvalidInput"),
        ("/v1/forget", {}, 400, "ScopeError"),
        ("/v1/status", {"handle": "efr_nosuch"}, 404, "NotFound"),
        ("/v1/retain", {"key": "nosuch", "subject": "s", "purpose": "support", "basis": "consent"}, 404, "NotFound"),
        ("/v1/wait", {"handle": "h", "until": "later"}, 400, "InvalidInput"),
    ],
)
def test_errors_carry_the_library_type_and_never_the_input(served, route, body, status, kind):
    key = served.key(TENANT)
    post(served, "/v1/write", {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
    r = post(served, route, body, key)
    assert (r.status_code, r.json()["error"]["type"]) == (status, kind)
    assert set(r.json()["error"]) >= {"type", "message"}
    for value in ("whim", "nosuch", "colour", "efr_nosuch", "later", TENANT):
        assert value not in r.json()["error"]["message"]


def test_malformed_json_and_unknown_routes_get_the_envelope(served):
    key = served.key(TENANT)
    r = httpx.post(served.url + "/v1/write", content=b"{not json", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 422 and r.json()["error"]["type"] == "InvalidInput"
    r = httpx.post(served.url + "/v1/nosuch", json={}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFound"


def test_a_body_that_is_not_json_and_a_wrong_method_say_what_to_do(served):
    """A syntax error was answered "8: JSON decode error" (a byte position, nothing to do), a
    body not UTF-8, a number too long or nesting too deep a 400 "There was an error parsing the
    body" (FastAPI's words), and a wrong method a 405 typed InvalidInput, "Method Not Allowed",
    without the Allow header HTTP requires. Now every unparsable body is one 422 saying what
    the server reads, and a 405 is MethodNotAllowed naming the method the route takes."""
    headers = {"Authorization": f"Bearer {served.key(TENANT)}", "content-type": "application/json"}
    for body in (
        b'{"key": "Bartholomew',
        b'{"key": "\xff Bartholomew"}',
        b'{"k": 1' + b"0" * 5000 + b"}",
        b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ):
        r = httpx.post(served.url + "/v1/write", content=body, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["type"] == "InvalidInput" and "not JSON this server can read" in r.text
        assert "Bartholomew" not in r.text
    for method in ("GET", "PUT", "DELETE"):
        r = httpx.request(method, served.url + "/v1/write", headers=headers)
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert r.json()["error"] == {
            "type": "MethodNotAllowed",
            "message": "this route takes POST only: see /openapi.json",
        }
    assert served.store.stats()["epoch"] == 0  # nothing was written


def test_head_answers_as_get_and_a_trailing_slash_is_a_typed_404(served):
    """HEAD /v1/health answered 405 (HTTP asks for GET's answer without its body), and a
    trailing slash answered a 307 redirect on every route (a POST redirected, with its body,
    to a route it may not reach) where any other wrong path gets a typed 404. Now HEAD works
    where GET does, and '/v1/health/' is a 404 with the error body, like every wrong path."""
    key = served.key(TENANT)
    get = httpx.get(served.url + "/v1/health")
    head = httpx.head(served.url + "/v1/health")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"] == "application/json"
    assert httpx.head(served.url + "/openapi.json").status_code == 200
    r = httpx.head(served.url + "/v1/read", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = httpx.request("OPTIONS", served.url + "/v1/health")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    wrong = (("GET", "/v1/health/"), ("POST", "/v1/read/"), ("POST", "/v1/write/"), ("GET", "/openapi.json/"))
    for method, path in wrong:
        body = {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"} if method == "POST" else None
        r = httpx.request(method, served.url + path, json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 404 and "location" not in r.headers, (path, r.status_code)
        assert r.json()["error"]["type"] == "NotFound" and "'/'" in r.json()["error"]["message"]
    assert served.store.stats()["epoch"] == 0  # nothing was written


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(served, tmp_path):
    key = served.key(TENANT)
    app = create_app(served.store, served.ring, max_body=1000)
    with BackgroundServer(app, access_log=False) as small:
        body = {"key": "big", "text": "x" * 2000, "subject": "s", "purpose": "p"}
        r = httpx.post(small.url + "/v1/write", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 413 and r.json()["error"]["type"] == "PayloadTooLarge"

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(5):
                yield b'{"key": "' + b"y" * 400

        r = httpx.post(small.url + "/v1/write", content=chunks(), headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 413
    assert served.store.stats()["epoch"] == 0  # nothing was written


@pytest.mark.parametrize(
    "options",
    [{"max_wait": float("nan")}, {"max_wait": -1}, {"max_wait": float("inf")}, {"max_body": 0}, {"max_body": 1.5}],
    ids=["wait-nan", "wait-negative", "wait-inf", "body-0", "body-float"],
)
def test_a_server_limit_that_limits_nothing_is_refused(served, options):
    """`efface serve --max-wait nan` got through click's range check (NaN compares false) and
    capped nothing: min(timeout, nan) is the client's timeout, and /v1/health said NaN."""
    with pytest.raises(InvalidInput, match=r"max_wait|max_body"):
        create_app(served.store, served.ring, **options)


def test_wait_is_capped_by_the_server(served):
    key = served.key(TENANT)
    app = create_app(served.store, served.ring, max_wait=0.2)
    with BackgroundServer(app, access_log=False) as capped:
        assert httpx.get(capped.url + "/v1/health").json()["max_wait_s"] == 0.2
        post(served, "/v1/write", {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
        handle = post(served, "/v1/forget", {"key": "k1"}, key).json()["handle"]
        # A client asking for an hour gets an answer (the status now), not a hung request.
        r = httpx.post(
            capped.url + "/v1/wait",
            json={"handle": handle, "timeout": 3600},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["handle"] == handle


def test_the_openapi_document_names_every_route_its_bodies_and_the_bearer_scheme(served):
    doc = httpx.get(served.url + "/openapi.json").json()
    assert {"/v1/write", "/v1/forget", "/v1/wait", "/v1/verify", "/v1/certificate"} <= set(doc["paths"])
    schemes = doc["components"]["securitySchemes"]
    assert any(s.get("scheme", "").lower() == "bearer" for s in schemes.values())
    forget = doc["paths"]["/v1/forget"]["post"]
    assert forget["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Receipt")
    assert {"401", "403", "404"} <= set(forget["responses"])
    write = doc["components"]["schemas"]["WriteBody"]
    assert write["properties"]["text"]["type"] == "string" and "text" in write["required"]


def test_every_copy_s_state_travels_on_the_receipt_the_status_and_the_verification(served):
    """The JSON of /v1/forget, /v1/status, /v1/wait and /v1/verify carries ``copies``, and the
    OpenAPI document declares them (issue #34 item 3; docs/evidence-ladder.md)."""
    key = served.key(TENANT)
    post(served, "/v1/write", {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
    receipt = post(served, "/v1/forget", {"subject": SUBJECT}, key).json()
    assert receipt["copies"]["store"] == {
        "state": "pending",
        "reason": receipt["copies"]["store"]["reason"],
        "checked_at": None,
    }
    handle = {"handle": receipt["handle"]}
    assert post(served, "/v1/status", handle, key).json()["copies"]["store"]["state"] in ("pending", "unchecked")
    waited = post(served, "/v1/wait", {**handle, "timeout": 20}, key).json()
    assert waited["erased"] and waited["copies"]["store"]["state"] == "unchecked"
    v = post(served, "/v1/verify", handle, key).json()
    assert v["level"] == "erased" and v["copies"]["store"]["state"] == "erased"
    st = post(served, "/v1/status", handle, key).json()
    assert st["level"] == "erased" and st["copies"] == v["copies"]
    assert isinstance(st["copies"]["store"]["checked_at"], float)
    schemas = httpx.get(served.url + "/openapi.json").json()["components"]["schemas"]
    for name in ("Receipt", "Status", "Verification"):
        assert schemas[name]["properties"]["copies"]["additionalProperties"]["$ref"].endswith("/CopyState"), name
        assert "copies" not in schemas[name].get("required", []), f"{name}: an older server's JSON still reads"
    assert set(schemas["CopyState"]["properties"]) == {"state", "reason", "checked_at"}


@pytest.fixture
def uvicorn_logs(caplog):
    """uvicorn's loggers do not propagate: hand them the capture handler directly."""
    caplog.set_level(logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.access", "uvicorn.error")]
    for lg in loggers:
        lg.addHandler(caplog.handler)
    yield caplog
    for lg in loggers:
        lg.removeHandler(caplog.handler)


def test_logs_carry_no_text_query_key_identifier_or_tenant(served, uvicorn_logs):
    caplog = uvicorn_logs
    key = served.key(TENANT)
    post(served, "/v1/write", {"key": "k-bq", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
    post(served, "/v1/register_subject", {"subject": SUBJECT, "identifiers": [IDENT]}, key)
    post(served, "/v1/recall", {"query": QUERY, "purpose": "support"}, key)
    post(served, "/v1/read", {"key": "k-bq", "purpose": "nosuch"}, key)
    post(served, "/v1/read", {"key": "k-bq", "purpose": "support", "tenant": "someone-else"}, key)
    handle = post(served, "/v1/forget", {"subject": SUBJECT}, key).json()["handle"]
    post(served, "/v1/wait", {"handle": handle, "timeout": 10}, key)
    post(served, "/v1/verify", {"handle": handle}, key)
    httpx.post(served.url + f"/v1/read?key=k-bq&q={TENANT}", json={}, headers={"Authorization": f"Bearer {key}"})
    post(served, "/v1/status", {"handle": handle}, "efk_0123456789ab_" + "A" * 43)
    # The server's logs (uvicorn's, efface's); the test's own httpx client logs its URLs itself.
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith(("uvicorn", "efface")))
    assert "POST /v1/write" in logged  # the access log is on and captured
    for secret in (TEXT, QUERY, SUBJECT, IDENT, TENANT, "k-bq", key, handle, "someone-else", "Bartholomew"):
        assert secret not in logged


def test_server_timing_splits_a_lane_call_into_its_phases(served):
    # app is the whole request; a call run in a lane adds lane (waiting for its thread),
    # store (the library call) and render (the JSON), each a part of app.
    key = served.key(TENANT)
    post(served, "/v1/write", {"key": "k1", "text": TEXT, "subject": SUBJECT, "purpose": "support"}, key)
    r = post(served, "/v1/recall", {"query": QUERY, "purpose": "support"}, key)
    timing = dict(part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))
    assert set(timing) == {"app", "lane", "store", "render"}
    ms = {k: float(v) for k, v in timing.items()}
    assert min(ms.values()) >= 0 and ms["lane"] + ms["store"] + ms["render"] <= ms["app"]
    health = httpx.get(served.url + "/v1/health")
    assert [p.split(";")[0] for p in health.headers["server-timing"].split(",")] == ["app"]


SURROGATE = '"\\ud800"'  # valid JSON, not valid Unicode: a lone surrogate


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/status", '{"handle": %s}'),
        ("/v1/wait", '{"handle": %s, "timeout": 1}'),
        ("/v1/verify", '{"handle": %s}'),
        ("/v1/certificate", '{"handle": %s}'),
        ("/v1/certificate.html", '{"handle": %s}'),
        ("/v1/set_policy", '{"policy": "keep", "reason": %s}'),
        ("/v1/set_policy", '{"policy": "quarantine", "reason": %s}'),
        ("/v1/release", '{"key": "k1", "reason": %s}'),
    ],
)
def test_a_lone_surrogate_is_bad_input_on_every_route_and_logs_nothing(served, uvicorn_logs, route, body):
    """#33: a lone surrogate in a handle or a reason answered 500 and wrote a traceback."""
    key = served.key(TENANT)
    r = httpx.post(
        served.url + route,
        content=(body % SURROGATE).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert (r.status_code, r.json()["error"]["type"]) == (400, "InvalidInput")
    records = [r for r in uvicorn_logs.records if r.name.startswith(("uvicorn.error", "efface"))]
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR], [r.getMessage() for r in records]


def test_an_unexpected_error_is_logged_by_its_type_only(served, uvicorn_logs, monkeypatch):
    """Starlette answered 500 and then raised the error again, and uvicorn logged it whole:
    a traceback with the error's message (here a marker standing for a text or a key)."""

    def fails(*_a, **_k):
        raise RuntimeError("marker-Quince-7f3a")

    monkeypatch.setattr(served.store, "status", fails)
    r = post(served, "/v1/status", {"handle": "efr_x"}, served.key(TENANT))
    assert (r.status_code, r.json()["error"]["type"]) == (500, "InternalError")
    records = [r for r in uvicorn_logs.records if r.name.startswith(("uvicorn", "efface"))]
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == ["request failed with RuntimeError"]
    assert not [r for r in records if r.exc_info] and "Quince" not in uvicorn_logs.text
