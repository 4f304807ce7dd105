"""Typed routes on an ``ApiResolver``: the input gate first, as always; then the route's
typed body, query and path values, validated by Powertools and refused in the words
``request_rules.parse_model`` uses, so that a request gets the same status and body as when
the handler parsed its body itself. (That a handler module's cold import still loads no
pydantic is checked in a fresh interpreter: tests/e2e/test_cold_imports.py.)"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from aws_lambda_powertools.event_handler import Response

from convo_memory.api import SessionCreate
from convo_memory.domain import request_rules
from convo_memory.domain.errors import ServiceError
from convo_memory.edge.resolver import ApiResolver, Body, Query, api, json_response
from local_runtime.handlers import LambdaContext
from local_runtime.http_gateway import HttpRequest, build_http_event

WORKSPACE = {"workspaceId": "ws_1"}
app = ApiResolver()


@app.post("/v1/things/<thing_id>")
def create_thing(
    thing_id: str, body: Annotated[api.SessionCreate, Body()]
) -> Response[api.Session]:
    return json_response(201, {"thing": thing_id, "externalRef": body.external_ref})


@app.get("/v1/things")
def list_things(
    external_ref: Annotated[str, Query(alias="externalRef", min_length=1)],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response[dict[str, Any]]:
    return json_response(200, {"externalRef": external_ref, "limit": limit})


def call(
    method: str,
    path: str,
    body: bytes = b"",
    *,
    query: str = "",
    authorizer: dict[str, Any] | None = WORKSPACE,
    headers: list[tuple[str, str]] | None = None,
) -> tuple[int, Any]:
    request = HttpRequest(
        method, path, query, headers or [("content-type", "application/json")], body
    )
    event = build_http_event(request, f"{method} {path}", None, authorizer)
    context = LambdaContext("Test", 128, "arn:aws:lambda:us-east-1:1:function:Test", "lambda-id")
    result = app.resolve(event, context)  # type: ignore[arg-type]  # the runtime's duck-typed context
    return result["statusCode"], json.loads(result["body"])


def parse_model_refusal(data: Any) -> dict[str, Any]:
    """What the input gate answers when a handler parses this body itself."""
    with pytest.raises(ServiceError) as refused:
        request_rules.parse_model(SessionCreate, data)
    return refused.value.to_body()


BAD_BODIES = [
    {},
    {"capabilityId": "cap-1"},
    {"capabilityId": 7, "externalRef": "u1"},
    {"capabilityId": "cap-1", "externalRef": "u1", "surprise": True},
    {"capabilityId": "cap-1", "externalRef": "u1", "principal": {f"c{n}": "v" for n in range(33)}},
    {"capabilityId": "", "externalRef": "x" * 300, "metadata": []},
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_body_the_types_refuse_is_answered_as_the_gate_answers_it(body: dict[str, Any]) -> None:
    status, answer = call("POST", "/v1/things/t1", json.dumps(body).encode())

    assert status == 422
    assert answer == parse_model_refusal(body)


def test_a_body_the_types_accept_reaches_the_handler_validated() -> None:
    body = {"capabilityId": "cap-1", "externalRef": "u1"}

    assert call("POST", "/v1/things/t1", json.dumps(body).encode()) == (
        201,
        {"thing": "t1", "externalRef": "u1"},
    )


def test_the_gate_refuses_before_the_types_are_read() -> None:
    no_token = call("POST", "/v1/things/t1", b"{}", authorizer={"workspaceId": ""})
    not_json = call("POST", "/v1/things/t1", b"{nope")
    nan = call("POST", "/v1/things/t1", b'{"capabilityId": NaN}')
    long_id = call("POST", "/v1/things/" + "x" * 200, b"{}")

    assert no_token[0] == 401 and no_token[1]["error"]["code"] == "unauthorized"
    assert not_json[0] == 400 and not_json[1]["error"]["code"] == "invalid_json"
    assert nan[0] == 400 and nan[1]["error"]["code"] == "invalid_json"
    assert long_id[0] == 404 and long_id[1]["error"]["code"] == "not_found"


def test_a_json_body_is_read_whatever_its_content_type_as_every_door_reads_it() -> None:
    body = json.dumps({"capabilityId": "cap-1", "externalRef": "u1"}).encode()
    form = [("content-type", "application/x-www-form-urlencoded")]

    assert call("POST", "/v1/things/t1", body, headers=form)[0] == 201
    assert call("POST", "/v1/things/t1", body, headers=[])[0] == 201


def test_typed_query_values_are_passed_validated_or_refused_with_their_place() -> None:
    ok = call("GET", "/v1/things", query="externalRef=u1&limit=7")
    default = call("GET", "/v1/things", query="externalRef=u1")
    too_many = call("GET", "/v1/things", query="externalRef=u1&limit=101")
    missing = call("GET", "/v1/things")

    assert ok == (200, {"externalRef": "u1", "limit": 7})
    assert default == (200, {"externalRef": "u1", "limit": 20})
    assert too_many[0] == 422 and too_many[1]["error"]["code"] == "validation_error"
    assert too_many[1]["error"]["message"].startswith("query.limit: ")
    assert too_many[1]["error"]["details"][0]["loc"] == ["query", "limit"]
    assert missing[0] == 422 and missing[1]["error"]["details"][0]["loc"] == [
        "query",
        "externalRef",
    ]
