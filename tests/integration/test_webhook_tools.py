"""Webhook calls over real sockets to a tool server on 127.0.0.1: the signed request the
contract describes, what a response becomes, and the URL policy checked again at call
time (connecting to the address that was checked)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from convo_memory.adapters.tools.url_policy import UrlPolicy
from convo_memory.adapters.tools.webhook import MAX_RESPONSE_BYTES, WebhookClient, webhook_body
from convo_memory.domain.allowed_hosts import parse_allowed_hosts
from tests.fakes.adapters import FakeResolver
from tests.fakes.webhook_server import Reply, WebhookServer, verify

SECRET = "whsec_test-secret-0123456789"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer(secret=SECRET, default_output="ETA Friday") as server:
        yield server


def client_for(hook: WebhookServer, resolver: FakeResolver | None = None) -> WebhookClient:
    return WebhookClient(UrlPolicy(parse_allowed_hosts([hook.host]), resolve=resolver))


def body(tool: str = "track", principal: dict[str, str] | None = PRINCIPAL) -> bytes:
    return webhook_body(tool, {"query": "where is 12345?"}, principal, "ses_1", "cap_1", "run_1")


def test_a_call_is_signed_and_carries_exactly_the_contracts_body(hook: WebhookServer) -> None:
    outcome = client_for(hook).call(hook.url("/track"), body(), SECRET, timeout=5)

    assert (outcome.status, outcome.output) == ("ok", "ETA Friday")
    [call] = hook.calls
    assert call.signature_valid
    assert call.headers["Content-Type"] == "application/json"
    assert call.headers["X-Convo-Timestamp"].isdigit()
    assert call.headers["X-Convo-Signature"].startswith("v1=")
    assert verify(
        SECRET, call.headers["X-Convo-Timestamp"], call.headers["X-Convo-Signature"], call.raw_body
    )
    assert call.body == {
        "tool": "track",
        "input": {"query": "where is 12345?"},
        "principal": PRINCIPAL,
        "sessionId": "ses_1",
        "capabilityId": "cap_1",
        "runId": "run_1",
    }
    # Another secret does not verify: the signature covers the secret, the time and the body.
    assert not verify(
        "another",
        call.headers["X-Convo-Timestamp"],
        call.headers["X-Convo-Signature"],
        call.raw_body,
    )
    assert not verify(
        SECRET,
        call.headers["X-Convo-Timestamp"],
        call.headers["X-Convo-Signature"],
        call.raw_body + b" ",
    )


def test_a_null_principal_is_sent_as_null(hook: WebhookServer) -> None:
    client_for(hook).call(hook.url(), body(principal=None), SECRET, timeout=5)
    assert hook.calls[0].principal is None and '"principal":null' in hook.calls[0].raw_body.decode()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"output": "in transit"}, "in transit"),
        ({"output": {"eta": "2025-06-14", "stops": 2}}, '{"eta": "2025-06-14", "stops": 2}'),
        ({"result": "no output field"}, '{"result": "no output field"}'),
        ("plain text, not JSON", "plain text, not JSON"),
        (b"\xff\xfe broken utf-8", "\ufffd\ufffd broken utf-8"),
    ],
)
def test_a_2xx_response_becomes_the_result(
    hook: WebhookServer, answer: object, expected: str
) -> None:
    hook.answers["/t"] = Reply(200, answer)
    outcome = client_for(hook).call(hook.url("/t"), body(), SECRET, timeout=5)
    assert (outcome.status, outcome.output) == ("ok", expected)


def test_an_error_status_becomes_an_error_result(hook: WebhookServer) -> None:
    hook.answers["/t"] = Reply(503, "down for maintenance")
    outcome = client_for(hook).call(hook.url("/t"), body(), SECRET, timeout=5)
    assert outcome.status == "error"
    assert outcome.output == "the tool answered HTTP 503: down for maintenance"


def test_a_wrong_secret_is_refused_by_the_tool(hook: WebhookServer) -> None:
    outcome = client_for(hook).call(hook.url(), body(), "not-the-secret", timeout=5)
    assert outcome.status == "error" and "HTTP 401" in outcome.output
    assert hook.calls[0].signature_valid is False


def test_redirects_are_not_followed(hook: WebhookServer) -> None:
    hook.answers["/moved"] = Reply(302, "", headers={"Location": hook.url("/elsewhere")})
    outcome = client_for(hook).call(hook.url("/moved"), body(), SECRET, timeout=5)
    assert outcome.status == "error" and "redirect (HTTP 302)" in outcome.output
    assert [c.path for c in hook.calls] == ["/moved"]


def test_a_slow_tool_times_out(hook: WebhookServer) -> None:
    hook.answers["/slow"] = Reply(200, {"output": "late"}, delay=2)
    outcome = client_for(hook).call(hook.url("/slow"), body(), SECRET, timeout=0.3)
    assert outcome.status == "timeout" and outcome.output.startswith("the tool did not answer")


def test_the_response_is_read_up_to_one_mebibyte(hook: WebhookServer) -> None:
    hook.answers["/full"] = Reply(200, b"a" * MAX_RESPONSE_BYTES)
    hook.answers["/over"] = Reply(200, b"a" * (MAX_RESPONSE_BYTES + 1))
    client = client_for(hook)
    full = client.call(hook.url("/full"), body(), SECRET, timeout=10)
    over = client.call(hook.url("/over"), body(), SECRET, timeout=10)
    assert full.status == "ok" and len(full.output) == MAX_RESPONSE_BYTES
    assert over.status == "error" and "larger than 1048576 bytes" in over.output


def test_an_unreachable_tool_is_an_error_result() -> None:
    with WebhookServer() as gone:
        url, host = gone.url(), gone.host
    outcome = WebhookClient(UrlPolicy(parse_allowed_hosts([host]))).call(url, body(), SECRET, 2)
    assert outcome.status == "error" and outcome.output.startswith("could not reach the tool")


def test_the_call_connects_to_the_address_that_was_checked(hook: WebhookServer) -> None:
    # An allowed name the system resolver does not know: only the checked address works.
    resolver = FakeResolver({"tools.test": ["127.0.0.1"]})
    client = WebhookClient(
        UrlPolicy(parse_allowed_hosts([f"tools.test:{hook.port}"]), resolve=resolver)
    )
    outcome = client.call(f"http://tools.test:{hook.port}/pinned", body(), SECRET, timeout=5)
    assert outcome.status == "ok"
    assert hook.calls[0].headers["Host"] == f"tools.test:{hook.port}"


def test_a_host_whose_dns_now_points_inside_is_refused_at_call_time(hook: WebhookServer) -> None:
    # Public when the capability was created; rebound to loopback before the call.
    resolver = FakeResolver({"rebind.example": ["93.184.216.34"]})
    policy = UrlPolicy(resolve=resolver)
    url = f"https://rebind.example:{hook.port}/x"
    assert policy.problem(url) is None
    resolver.table["rebind.example"] = ["127.0.0.1"]

    outcome = WebhookClient(policy).call(url, body(), SECRET, timeout=5)

    assert outcome.status == "error"
    # Refused as "not allowed", never naming what the name now resolves to.
    assert "not allowed" in outcome.output and "127.0.0.1" not in outcome.output
    assert hook.calls == []  # nothing was sent


@pytest.mark.parametrize(
    "url", ["http://10.0.0.7/x", "https://169.254.169.254/latest/meta-data/", "https://[::1]/x"]
)
def test_private_and_metadata_urls_are_refused_at_call_time_too(url: str) -> None:
    outcome = WebhookClient(UrlPolicy()).call(url, body(), SECRET, timeout=1)
    assert outcome.status == "error" and outcome.output.startswith("the tool was not called")


def test_the_signed_body_is_compact_utf8_json() -> None:
    raw = webhook_body("t", {"q": "café"}, {"u": "ü"}, None, "c", "r")
    assert raw == json.dumps(
        {
            "tool": "t",
            "input": {"q": "café"},
            "principal": {"u": "ü"},
            "sessionId": None,
            "capabilityId": "c",
            "runId": "r",
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
