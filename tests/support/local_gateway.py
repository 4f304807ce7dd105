"""The local gateway under test without a runtime: a registry of fake functions, a
gateway over them, and the check that a refusal is in the contract's shape. Shared by
tests/unit/test_gateway_errors.py (requests handed to the gateway in-process) and
tests/e2e/test_gateway_sockets.py (raw bytes over 127.0.0.1)."""

from __future__ import annotations

import json
from typing import Any

from local_runtime.http_gateway import AuthorizerConfig, HttpGateway, Route

CONTRACT_CODES = {
    "invalid_json",
    "unauthorized",
    "not_found",
    "payload_too_large",
    "validation_error",
    "rate_limited",
    "internal",
}


class FakeRegistry:
    """Invokes by name; each function is a callable or an exception to raise."""

    def __init__(self, **functions: Any) -> None:
        self.functions = functions

    def invoke(self, name: str, event: Any, request_id: str | None = None) -> Any:
        behaviour = self.functions[name]
        if isinstance(behaviour, BaseException):
            raise behaviour
        return behaviour(event)


def gateway(registry: FakeRegistry, timeout: float = 30.0) -> HttpGateway:
    routes = [
        Route("GET", "/open", "Open"),
        Route("GET", "/guarded", "Open", authorizer="Auth"),
        Route("GET", "/busy", "Busy"),
        Route("GET", "/boom", "Boom"),
    ]
    authorizers = {"Auth": AuthorizerConfig("Authorizer", ttl_seconds=0)}
    return HttpGateway(("127.0.0.1", 0), routes, registry, authorizers, False, timeout)  # type: ignore[arg-type]


def assert_contract_error(status: int, body: bytes, expected_status: int, code: str) -> Any:
    assert status == expected_status, body
    parsed = json.loads(body)
    assert set(parsed) == {"error"} and parsed["error"]["code"] == code
    assert parsed["error"]["code"] in CONTRACT_CODES and parsed["error"]["message"]
    return parsed
