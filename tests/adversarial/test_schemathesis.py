"""Schemathesis against a real `lantern serve` process: cases generated from the gateway's own
`/openapi.json` (both chat doors, the tool runs, the operational and admin routes; valid and
invalid bodies, headers and queries) get no 5xx. Bounded: a few dozen examples per route."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.adversarial.edge_proc import ACME_KEY, EdgeGateway, edge_gateway
from tests.e2e.harness import ADMIN_TOKEN

EXAMPLES_PER_ROUTE = 30
ROUTES = {  # every route the gateway serves, and the methods /openapi.json must declare
    "/v1/chat/completions": {"post"},
    "/v1/messages": {"post"},
    "/v1/models": {"get"},
    "/healthz": {"get"},
    "/health": {"get"},
    "/ready": {"get"},
    "/metrics": {"get"},
    "/admin/policy": {"get"},
    "/admin/reports/cost": {"get"},
    "/admin/reports/breakeven": {"get"},
    "/admin/reports/spend": {"get"},
    "/admin/reports/sessions": {"get"},
    "/admin/reports/budgets": {"get"},
    "/admin/keys": {"get", "post"},
    "/admin/keys/{key_id}/expire": {"post"},
    "/admin/keys/{key_id}/revoke": {"post"},
    "/v1/tools/runs": {"post"},
    "/v1/tools/runs/{run_id}": {"get"},
    "/v1/responses": {"post"},
    "/v1/responses/{response_id}": {"get", "delete"},
    "/v1/responses/{response_id}/input_items": {"get"},
    "/v1/messages/count_tokens": {"post"},
    "/v1/models/{model_id}": {"get"},
    "/v1/completions": {"post"},
    "/v1/embeddings": {"post"},
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeGateway]:
    with edge_gateway(tmp_path_factory.mktemp("fuzz")) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def api(gw: EdgeGateway) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(gw.url + "/openapi.json")


def test_openapi_declares_every_route_and_the_chat_bodies(api: schemathesis.BaseSchema) -> None:
    paths = api.raw_schema["paths"]
    assert {path: set(ops) for path, ops in paths.items()} == ROUTES
    for path, model in (
        ("/v1/chat/completions", "ChatCompletionRequest"),
        ("/v1/messages", "MessagesRequest"),
        ("/v1/tools/runs", "ToolRunBody"),
        ("/v1/responses", "ResponsesCreateRequest"),
    ):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert model in api.raw_schema["components"]["schemas"]


SERVED_MODEL = {
    "/v1/chat/completions": "gpt-4o-mini",
    "/v1/messages": "claude-sonnet-4-5",
    "/v1/responses": "gpt-4o-mini",
}


def with_model(case: schemathesis.Case, model: str) -> schemathesis.Case:
    """A served model name (the schema allows any string; the gateway serves a few)."""
    if isinstance(case.body, dict):
        case.body["model"] = model
    return case


# routes with a body or a query to break (the others have nothing a negative case could change)
NEGATABLE = (
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
    "/v1/tools/runs",
    "/admin/reports/cost",
)
CASES = [
    *((path, m, GenerationMode.POSITIVE) for path, ops in ROUTES.items() for m in sorted(ops)),
    *(
        (path, "post" if path.startswith("/v1") else "get", GenerationMode.NEGATIVE)
        for path in NEGATABLE
    ),
]


@pytest.mark.parametrize(("path", "method", "mode"), CASES)
def test_no_generated_request_gets_a_server_error(
    api: schemathesis.BaseSchema, path: str, method: str, mode: GenerationMode
) -> None:
    """Schemathesis' strategies driven by Hypothesis directly (its pytest plugin does not run
    under this pytest); derandomized, so every run sends the same cases. Valid chat calls
    must reach the upstream and be answered (a fuzzer refused at the door proves little)."""
    key = ADMIN_TOKEN if path.startswith("/admin/") else ACME_KEY
    statuses: list[int] = []

    strategy = api[path][method.upper()].as_strategy(generation_mode=mode)
    if mode is GenerationMode.POSITIVE and path in SERVED_MODEL:
        strategy = strategy.map(lambda case: with_model(case, SERVED_MODEL[path]))

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES_PER_ROUTE,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def no_server_error(case: schemathesis.Case) -> None:
        response = case.call(headers={"authorization": f"Bearer {key}"}, timeout=30)
        statuses.append(response.status_code)
        assert response.status_code < 500, f"{case.as_curl_command()}\n-> {response.text[:500]}"

    no_server_error()
    if mode is GenerationMode.POSITIVE and path in SERVED_MODEL:
        assert 200 in statuses
