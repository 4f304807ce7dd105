"""The OpenAPI document: made from the routes themselves (every function's ``ApiResolver``
routes, declared again on one resolver), valid 3.1, served without a token, and in step
with the routes of template.yaml and of the contract (so a route cannot be added or
dropped on one side only)."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from convo_memory.domain import errors
from convo_memory.edge.openapi import openapi_document
from local_runtime.aws_resources import function_specs
from tests.support.contract_routes import EXPECTED_ROUTES
from tests.support.inprocess_api import InProcessApi

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
# The 404 catch-all and two pages (the Studio, Swagger UI).
NOT_IN_THE_DOCUMENT = {("ANY", "$default"), ("GET", "/studio"), ("GET", "/v1/docs")}


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    paths = document["paths"]
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def codes(operation: dict[str, Any], status: str) -> list[str]:
    schema = operation["responses"][status]["content"]["application/json"]["schema"]
    return list(schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"])


def test_the_document_is_valid_openapi_3_1() -> None:
    document = openapi_document(FUNCTIONS, "https://api.example.com")

    validate(document)

    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "https://api.example.com"}]


def test_the_document_the_template_and_the_contract_name_the_same_routes() -> None:
    served = {
        route
        for spec in function_specs().values()
        for route in spec.http_routes
        if route not in NOT_IN_THE_DOCUMENT
    }
    contract = set(EXPECTED_ROUTES) - NOT_IN_THE_DOCUMENT

    assert operations(openapi_document(FUNCTIONS)) == served == contract


def test_every_contract_error_code_is_documented() -> None:
    every_code = {
        cls.code
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.ServiceError) and cls.code not in ("conflict",)
    }
    text = str(openapi_document(FUNCTIONS))

    missing = {code for code in every_code if f"'{code}'" not in text}

    assert missing == set()


def test_each_route_lists_the_refusals_its_declaration_names() -> None:
    paths = openapi_document(FUNCTIONS)["paths"]
    predict = paths["/v1/capabilities/{capabilityId}/predict"]["post"]
    fork = paths["/v1/sessions/{sessionId}/forks"]["post"]
    document = paths["/v1/openapi.json"]["get"]

    assert codes(predict, "404") == [
        "capability_not_found",
        "session_not_found",
        "file_not_found",  # (v5) an attachment's file id
        "not_found",
    ]
    assert codes(predict, "422") == ["validation_error", "idempotency_key_reused"]
    assert codes(predict, "502") == ["provider_error"]
    assert "Retry-After" in predict["responses"]["429"]["headers"]
    assert [p["name"] for p in predict["parameters"]] == ["capabilityId", "Idempotency-Key"]
    assert set(fork["responses"]) == {"201", "400", "401", "404", "413", "422", "429", "500", "503"}
    assert "401" not in document["responses"] and document["security"] == []


def test_the_openai_door_answers_in_its_own_error_shape() -> None:
    chat = openapi_document(FUNCTIONS)["paths"]["/v1/chat/completions"]["post"]

    error = chat["responses"]["429"]["content"]["application/json"]["schema"]["allOf"][1]
    assert error["properties"]["error"]["properties"]["type"] == {"const": "rate_limit_error"}
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert {p["name"] for p in chat["parameters"]} == {
        "X-Convo-Session-Id",
        "X-Convo-Session-Key",
        "X-Convo-User",
        "X-Convo-Principal",
        "Idempotency-Key",
    }


A_NEW_FUNCTION = """
from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.edge.api_contract import answers, header
from convo_memory.domain.errors import SessionArchived, SessionNotFound
from convo_memory.edge.resolver import ApiResolver, Body, Query, api, json_response

app = ApiResolver()


@app.post(
    "/v1/widgets/<widget_id>/parts",
    summary="A route no document was written for",
    tags=["widgets"],
    responses=answers(201, SessionNotFound, SessionArchived),
    openapi_extensions={"parameters": [header("X-Widget", {"type": "string"}, "A header.")]},
)
def add_part(
    widget_id: str,
    body: Annotated[api.ForkCreate, Body()],
    depth: Annotated[int, Query(ge=1, le=9)] = 3,
) -> Response[api.Session]:
    return json_response(201, {})


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
"""


def test_a_route_declared_on_its_handler_is_in_the_document_with_its_schema(
    tmp_path: Path,
) -> None:
    (tmp_path / "widgets").mkdir()
    (tmp_path / "widgets" / "app.py").write_text(textwrap.dedent(A_NEW_FUNCTION))
    (tmp_path / "worker").mkdir()  # no routes: not a route module
    (tmp_path / "worker" / "app.py").write_text("def handler(event, context):\n    return {}\n")

    document = openapi_document(tmp_path)

    validate(document)
    assert operations(document) == {("POST", "/v1/widgets/{widgetId}/parts")}
    operation = document["paths"]["/v1/widgets/{widgetId}/parts"]["post"]
    assert operation["operationId"] == "addPart" and operation["tags"] == ["widgets"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ForkCreate"
    }
    created = operation["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"$ref": "#/components/schemas/Session"}
    assert codes(operation, "404") == ["session_not_found", "not_found"]
    assert codes(operation, "409") == ["session_archived"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert parameters["widgetId"]["schema"] == {"type": "string", "minLength": 1, "maxLength": 128}
    assert parameters["depth"]["schema"]["maximum"] == 9 and not parameters["depth"]["required"]
    assert parameters["X-Widget"]["in"] == "header"
    schemas = document["components"]["schemas"]
    assert {"ForkCreate", "Session", "ErrorBody", "ErrorDetail"} <= set(schemas)
    assert not {"HTTPValidationError", "ValidationError"} & set(schemas)


def test_it_is_served_without_a_token_with_this_deployments_address(api: InProcessApi) -> None:
    response = api.call("GET", "/v1/openapi.json", headers={"host": "api.example.com"})

    assert response.status == 200
    assert response.body["openapi"] == "3.1.0"
    assert response.body["servers"] == [{"url": "http://api.example.com"}]
    assert ("POST", "/v1/sessions") in operations(response.body)


def test_swagger_ui_is_off_unless_the_deployment_turns_it_on(
    api: InProcessApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = api.call("GET", "/v1/docs")
    monkeypatch.setenv("SWAGGER_UI", "true")
    on = api.call("GET", "/v1/docs", headers={"host": "api.example.com"})

    assert off.status == 404 and off.body["error"]["code"] == "not_found"
    assert on.status == 200 and on.headers["Content-Type"].startswith("text/html")
    assert '"/v1/capabilities/{capabilityId}/predict"' in on.body
    assert "SwaggerUIBundle" in on.body and "<script src=" not in on.body
    assert on.headers["X-Frame-Options"] == "DENY"
