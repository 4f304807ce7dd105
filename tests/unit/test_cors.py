"""CORS preflight answers (convo_memory.doors.cors): what the streaming app and the local
runtime tell a browser that wants to call a door from another origin."""

from __future__ import annotations

from convo_memory.doors.cors import (
    ALLOWED_HEADERS,
    allowed_origins,
    is_preflight,
    preflight,
)

STUDIO = "https://abc123.execute-api.us-east-1.amazonaws.com"


def request(
    origin: str = STUDIO,
    method: str = "POST",
    headers: str = "authorization,content-type",
) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers,
    }


def test_any_origin_is_allowed_by_default_without_credentials() -> None:
    answer = preflight(request(), allowed_origins({}))

    headers = dict(answer.headers)
    assert answer.status == 204 and answer.allowed
    assert headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in headers
    assert set(headers["access-control-allow-headers"].split(", ")) == set(ALLOWED_HEADERS)
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-max-age"] == "600"


def test_a_listed_origin_is_echoed_and_an_unlisted_one_gets_no_allow_headers() -> None:
    origins = allowed_origins({"CORS_ALLOWED_ORIGINS": f" {STUDIO}/ , http://127.0.0.1:3000"})
    assert origins == (STUDIO, "http://127.0.0.1:3000")

    allowed = preflight(request(), origins)
    refused = preflight(request(origin="https://evil.example"), origins)

    assert dict(allowed.headers)["access-control-allow-origin"] == STUDIO
    assert "Origin" in dict(allowed.headers)["vary"]
    assert refused.status == 204 and not refused.allowed
    assert not any(name.startswith("access-control-") for name, _ in refused.headers)


def test_idempotency_key_is_an_allowed_header_and_others_are_not() -> None:
    assert preflight(request(headers="Authorization, Content-Type, Idempotency-Key")).allowed
    assert not preflight(request(headers="authorization, x-api-key")).allowed
    assert preflight(request(headers="")).allowed


def test_a_browser_app_on_openais_javascript_sdk_may_call_the_openai_compatible_door() -> None:
    # What openai-node sends from a page (dangerouslyAllowBrowser), plus our session headers.
    sdk_headers = (
        "authorization, content-type, x-stainless-arch, x-stainless-lang, x-stainless-os, "
        "x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, "
        "x-stainless-runtime-version, x-stainless-timeout, "
        "X-Convo-Session-Key, X-Convo-Principal, X-Convo-Session-Id"
    )

    answer = preflight(request(headers=sdk_headers))

    assert answer.allowed
    allowed = dict(answer.headers)["access-control-allow-headers"].split(", ")
    assert {"x-convo-session-key", "x-convo-principal", "x-stainless-timeout"} <= set(allowed)


def test_only_the_methods_of_the_door_are_allowed() -> None:
    stream_only = ("POST",)

    assert preflight(request(method="POST"), methods=stream_only).allowed
    assert not preflight(request(method="DELETE"), methods=stream_only).allowed
    assert preflight(request(method="delete")).allowed  # the HTTP API's methods
    assert not preflight(request(method="PUT")).allowed


def test_a_preflight_is_an_options_request_asking_for_a_method_from_an_origin() -> None:
    assert is_preflight("OPTIONS", request())
    assert is_preflight("options", {k.lower(): v for k, v in request().items()})
    assert not is_preflight("POST", request())
    assert not is_preflight("OPTIONS", {"Origin": STUDIO})
    assert not is_preflight("OPTIONS", {"Access-Control-Request-Method": "POST"})


def test_a_blank_setting_falls_back_to_the_default() -> None:
    assert allowed_origins({"CORS_ALLOWED_ORIGINS": " , "}) == ("*",)
    assert not preflight(request(origin=""), ("*",)).allowed


def test_an_actual_response_gets_the_allow_origin_header_only_for_an_allowed_origin() -> None:
    from convo_memory.doors.cors import actual_response_headers

    listed = (STUDIO, "http://127.0.0.1:3000")

    assert actual_response_headers({"Origin": STUDIO}) == (("access-control-allow-origin", "*"),)
    assert actual_response_headers({"origin": STUDIO + "/"}, listed) == (
        ("access-control-allow-origin", STUDIO + "/"),
        ("vary", "Origin"),
    )
    assert actual_response_headers({"Origin": "https://evil.example"}, listed) == ()
    assert actual_response_headers({}) == ()  # no Origin: not a cross-origin request
