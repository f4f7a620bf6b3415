"""Property-based fuzzing of the OpenAPI schema (schemathesis + hypothesis): whatever a client sends,
the API answers without a server error (no 5xx), and every error is one line."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="fuzzing needs the webtest extra (schemathesis)")

from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from shardwise.web.app import WebSettings, create_app  # noqa: E402
from shardwise.web.jobs import Limits  # noqa: E402

# Searches the fuzzer starts are cut at 2 s (the server's time limit, answered as 422) to keep the suite short.
APP = create_app(WebSettings(limits=Limits(time_limit_s=2.0)))
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
SEARCHES = ["/api/train/plan", "/api/serve/plan", "/api/serve/simulate", "/api/rl/plan"]
FUZZ = {"deadline": None, "derandomize": True, "phases": [Phase.explicit, Phase.generate],
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]}


def check(case: schemathesis.Case) -> None:
    case.query = {k: v for k, v in (case.query or {}).items() if k != "background"}  # wait for each search
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.path} -> {response.status_code}: {response.text[:500]}"
    content_type = (response.headers.get("content-type") or [""])[0]
    if response.status_code >= 400 and content_type.startswith("application/json"):
        detail = response.json().get("detail")
        assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail


@SCHEMA.exclude(path=SEARCHES).parametrize()
@settings(max_examples=30, **FUZZ)
def test_quick_endpoints_never_fail(case):
    check(case)


@SCHEMA.include(path=SEARCHES).parametrize()
@settings(max_examples=10, **(FUZZ | {"phases": [Phase.generate]}))  # searches: no schemathesis coverage cases (slow)
def test_searches_never_fail(case):
    check(case)
