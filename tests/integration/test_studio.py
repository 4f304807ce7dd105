"""The Studio page through the template's routes, its wiring on AWS (stream URL, CORS),
and the streaming app's answer to a CORS preflight."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from convo_memory.doors.cors import ALLOWED_HEADERS
from convo_memory.doors.stream import StreamRequestHandler
from local_runtime.aws_resources import load_template
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant

ROOT = Path(__file__).resolve().parents[2]
# What the template lists is what the streaming app and the local runtime allow.
HEADERS = list(ALLOWED_HEADERS)
STUDIO_ORIGIN = "https://abc123.execute-api.us-east-1.amazonaws.com"


def test_the_studio_route_serves_the_page_without_a_token(api: InProcessApi) -> None:
    response = api.call("GET", "/studio")

    assert response.status == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert '<label for="token">API token</label>' in response.body
    assert 'role="log"' in response.body


def test_the_public_page_opens_no_door_to_the_api(api: InProcessApi, tenant: Tenant) -> None:
    assert api.call("GET", "/v1/capabilities").status == 401
    assert api.call("GET", "/v1/capabilities", token=tenant.token).status == 200


# ---------------------------------------------------------------- template wiring


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def test_allowed_origins_is_a_list_parameter_that_defaults_to_any_origin(
    template: dict[str, Any],
) -> None:
    parameter = template["Parameters"]["AllowedOrigins"]

    assert parameter["Type"] == "CommaDelimitedList"
    assert parameter["Default"] == "*"


def test_the_http_api_and_the_function_url_answer_cors_from_the_parameter(
    template: dict[str, Any],
) -> None:
    resources = template["Resources"]
    api_cors = resources["HttpApi"]["Properties"]["CorsConfiguration"]
    stream = resources["StreamFunction"]["Properties"]
    url_cors = stream["FunctionUrlConfig"]["Cors"]

    for cors in (api_cors, url_cors):
        assert cors["AllowOrigins"] == {"Ref": "AllowedOrigins"}
        assert cors["AllowHeaders"] == HEADERS
        assert "AllowCredentials" not in cors  # bearer tokens, never cookies
    assert url_cors["AllowMethods"] == ["POST"]
    assert {"GET", "POST", "PATCH", "DELETE"} <= set(api_cors["AllowMethods"])
    # The app behind the Web Adapter answers the preflights that reach it the same way.
    assert stream["Environment"]["Variables"]["CORS_ALLOWED_ORIGINS"] == {
        "Fn::Join": [",", {"Ref": "AllowedOrigins"}]
    }


def test_the_studio_page_is_told_the_function_url_to_stream_from(
    template: dict[str, Any],
) -> None:
    studio = template["Resources"]["StudioFunction"]["Properties"]

    assert studio["Environment"]["Variables"]["STREAM_URL"] == {
        "Fn::GetAtt": ["StreamFunctionUrl", "FunctionUrl"]
    }
    event = studio["Events"]["StudioPage"]["Properties"]
    assert (event["Method"], event["Path"], event["Auth"]) == (
        "GET",
        "/studio",
        {"Authorizer": "NONE"},
    )


# ---------------------------------------------------------------- streaming app preflight


@pytest.fixture
def stream_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    """functions/stream/app.py's HTTP server (what the Web Adapter proxies to)."""
    monkeypatch.setenv("CORS_ALLOWED_ORIGINS", STUDIO_ORIGIN)
    server = ThreadingHTTPServer(("127.0.0.1", 0), StreamRequestHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def options(address: tuple[str, int], origin: str, method: str = "POST") -> Any:
    connection = http.client.HTTPConnection(*address, timeout=10)
    connection.request(
        "OPTIONS",
        "/v1/capabilities/cap-generative/predict/stream",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_the_streaming_app_answers_a_preflight_from_an_allowed_origin(
    stream_server: tuple[str, int],
) -> None:
    response = options(stream_server, STUDIO_ORIGIN)

    assert response.status == 204
    assert response.getheader("access-control-allow-origin") == STUDIO_ORIGIN
    assert response.getheader("access-control-allow-methods") == "POST"
    assert set(response.getheader("access-control-allow-headers").split(", ")) == set(HEADERS)


def test_the_streaming_app_refuses_other_origins_and_methods(
    stream_server: tuple[str, int],
) -> None:
    for origin, method in (("https://evil.example", "POST"), (STUDIO_ORIGIN, "DELETE")):
        response = options(stream_server, origin, method)
        assert response.status == 204
        assert response.getheader("access-control-allow-origin") is None
