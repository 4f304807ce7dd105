"""The resolver glue every handler shares: the gate as middleware and the error mapping,
on a resolver of the test's own (so routes added later behave the same)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from convo_memory.domain.errors import SessionArchived, StoreUnavailable
from convo_memory.edge.resolver import install_error_handlers, json_body, json_response
from local_runtime.handlers import LambdaContext
from local_runtime.http_gateway import HttpRequest, build_http_event

app = APIGatewayHttpResolver()
install_error_handlers(app)
seen: list[Any] = []


@app.get("/open")
def open_route() -> Response:
    return json_response(200, {"open": True})


@app.post("/things/<thing_id>")
def post_thing(thing_id: str) -> Response:
    seen.append(json_body(app))
    return json_response(200, {"id": thing_id})


@app.get("/fail/<kind>")
def fail(kind: str) -> Response:
    raise {
        "bug": ZeroDivisionError("a bug"),
        "conflict": SessionArchived("archived"),
        "store": StoreUnavailable("throttled"),
    }[kind]


def call(
    method: str,
    path: str,
    body: bytes = b"",
    authorizer: dict[str, Any] | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> tuple[int, dict[str, str], Any]:
    request = HttpRequest(method, path, "", headers or [], body)
    route_key = f"{method} {path.rsplit('/', 1)[0]}/{{x}}" if "/things/" in path else method
    event = build_http_event(request, route_key, None, authorizer)
    context = LambdaContext("Test", 128, "arn:aws:lambda:us-east-1:1:function:Test", "lambda-id")
    result = app.resolve(event, context)  # type: ignore[arg-type]  # the runtime's duck-typed context
    return result["statusCode"], result.get("headers") or {}, json.loads(result["body"])


def test_a_route_without_the_authorizer_needs_no_workspace() -> None:
    assert call("GET", "/open") == (200, {"Content-Type": "application/json"}, {"open": True})


def test_behind_the_authorizer_an_unknown_token_is_401_before_the_body_is_read() -> None:
    status, _, body = call("POST", "/things/t1", b"\xff", authorizer={"workspaceId": ""})

    assert status == 401 and body["error"]["code"] == "unauthorized"


def test_the_gate_runs_before_the_handler_and_hands_it_the_parsed_body() -> None:
    seen.clear()
    ok = call("POST", "/things/t1", b'{"a": 1}', authorizer={"workspaceId": "ws_1"})
    refused = call("POST", "/things/t1", b'{"a": NaN}', authorizer={"workspaceId": "ws_1"})
    long_id = call("POST", "/things/" + "x" * 200, b"{}", authorizer={"workspaceId": "ws_1"})
    empty_key = call(
        "POST", "/things/t1", b"{}", {"workspaceId": "ws_1"}, [("Idempotency-Key", "")]
    )

    assert ok[0] == 200 and seen == [{"a": 1}]
    assert refused[0] == 400 and refused[2]["error"]["code"] == "invalid_json"
    assert long_id[0] == 404 and long_id[2]["error"]["code"] == "not_found"
    assert empty_key[0] == 422 and empty_key[2]["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("bug", 500, "internal"),
        ("conflict", 409, "session_archived"),
        ("store", 503, "unavailable"),
    ],
)
def test_every_failure_has_the_contracts_shape(kind: str, status: int, code: str) -> None:
    got, headers, body = call("GET", f"/fail/{kind}")

    assert got == status and body["error"]["code"] == code
    if status == 500:
        assert body["error"]["requestId"]
        assert "a bug" not in json.dumps(body)
    if status == 503:
        assert headers["Retry-After"] == "1"


def test_an_unknown_route_is_the_contracts_404() -> None:
    status, _, body = call("GET", "/nothing/here")

    assert status == 404 and body == {"error": {"code": "not_found", "message": "no such route"}}
