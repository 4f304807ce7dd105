"""The local gateway's own refusals, a request handed to it in-process: the contract's
shape, never a bare ``{"message"}`` but where API Gateway answers one itself. (Its
refusals of raw bytes over a socket, and stalled clients cut off:
tests/e2e/test_gateway_sockets.py.)"""

from __future__ import annotations

import json
from typing import Any

from local_runtime.handlers import TooManyRequestsError
from local_runtime.http_gateway import AuthorizerConfig, HttpGateway, HttpRequest, Route
from tests.support.local_gateway import FakeRegistry, assert_contract_error, gateway


class TestGatewayRefusals:
    def test_a_throttled_function_is_429_rate_limited_with_retry_after(self) -> None:
        server = gateway(FakeRegistry(Busy=TooManyRequestsError("busy")))
        try:
            response = server.handle_request_of(HttpRequest("GET", "/busy", "", []))
        finally:
            server.server_close()

        assert_contract_error(response.status, response.body, 429, "rate_limited")
        assert ("Retry-After", "1") in response.headers

    def test_a_crashing_function_or_authorizer_is_500_internal_with_the_request_id(
        self,
    ) -> None:
        server = gateway(
            FakeRegistry(Boom=RuntimeError("bug"), Open=lambda e: {}, Authorizer=KeyError("x"))
        )
        try:
            for path, headers in (("/boom", []), ("/guarded", [("Authorization", "Bearer t")])):
                request = HttpRequest("GET", path, "", headers)
                response = server.handle_request_of(request)
                body = assert_contract_error(response.status, response.body, 500, "internal")
                assert body["error"]["requestId"] == request.request_id
        finally:
            server.server_close()

    def test_an_authorizer_denial_is_401_in_the_contracts_shape(self) -> None:
        deny = FakeRegistry(Open=lambda e: {}, Authorizer=lambda e: {"isAuthorized": False})
        server = gateway(deny)
        try:
            headers = [("Authorization", "Bearer t")]
            response = server.handle_request_of(HttpRequest("GET", "/guarded", "", headers))
            assert_contract_error(response.status, response.body, 401, "unauthorized")
        finally:
            server.server_close()

    def test_a_missing_identity_source_is_api_gateways_own_401_without_the_authorizer(
        self,
    ) -> None:
        # What AWS answers when the header named as identity source is absent: the
        # authorizer is never invoked, and an HTTP API cannot shape this body.
        invoked: list[Any] = []
        server = gateway(FakeRegistry(Open=lambda e: {}, Authorizer=invoked.append))
        try:
            for headers in ([], [("Authorization", "")]):
                response = server.handle_request_of(HttpRequest("GET", "/guarded", "", headers))
                assert response.status == 401
                assert ("content-type", "application/json") in response.headers
                assert json.loads(response.body) == {"message": "Unauthorized"}
        finally:
            server.server_close()
        assert invoked == []

    def test_without_an_identity_source_the_authorizer_runs_for_a_missing_header(
        self,
    ) -> None:
        # The template's authorizer: no identity source, so a request without the header
        # reaches it, and the route answers the contract's 401 itself.
        seen: list[dict[str, Any]] = []

        def authorize(event: dict[str, Any]) -> dict[str, Any]:
            seen.append(event)
            return {"isAuthorized": True, "context": {"workspaceId": ""}}

        def route(event: dict[str, Any]) -> dict[str, Any]:
            workspace = event["requestContext"]["authorizer"]["lambda"]["workspaceId"]
            body = {"error": {"code": "unauthorized", "message": "missing or unknown API token"}}
            return {"statusCode": 401 if not workspace else 200, "body": json.dumps(body)}

        routes = [Route("GET", "/guarded", "Open", authorizer="Auth")]
        authorizers = {"Auth": AuthorizerConfig("Authorizer", identity_headers=(), ttl_seconds=0)}
        registry = FakeRegistry(Open=route, Authorizer=authorize)
        server = HttpGateway(("127.0.0.1", 0), routes, registry, authorizers)  # type: ignore[arg-type]
        try:
            for _ in range(2):
                response = server.handle_request_of(HttpRequest("GET", "/guarded", "", []))
                assert_contract_error(response.status, response.body, 401, "unauthorized")
        finally:
            server.server_close()
        assert len(seen) == 2  # never cached
        assert seen[0]["identitySource"] == []
