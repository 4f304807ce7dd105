"""The input gate through the real handlers and both streaming doors (issue 7 attacks).

Every poisoned request is refused with the contract's error, the same one on every door,
and leaves the conversations table exactly as it was.
"""

from __future__ import annotations

import base64
import json
import logging
import string
from typing import Any

import pytest

from functions.stream.app import StreamDoor
from tests.support import fake_aws
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session

END_USER = "customer-4471"


def item_count(api: InProcessApi) -> int:
    return fake_aws.item_count(
        api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
    )


def stream_door(
    api: InProcessApi, tenant: Tenant, raw: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    door = StreamDoor(lambda: api.container)
    response = door.handle(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        {"Authorization": f"Bearer {tenant.token}", **(headers or {})},
        raw,
    )
    raw_answer = b"".join(response.chunks).decode()
    if dict(response.headers)["content-type"].startswith("text/event-stream"):
        return response.status, raw_answer
    return response.status, json.loads(raw_answer)


def turn_doors(
    api: InProcessApi,
    tenant: Tenant,
    session_id: str,
    raw: bytes,
    headers: dict[str, str] | None = None,
) -> dict[str, tuple[int, Any]]:
    """The same raw body and headers through every door that runs a turn."""
    answers: dict[str, tuple[int, Any]] = {}
    for door, path in (
        ("predict", "/v1/capabilities/cap-generative/predict"),
        ("stream (HttpApi, buffered)", "/v1/capabilities/cap-generative/predict/stream"),
        ("session message", f"/v1/sessions/{session_id}/messages"),
    ):
        response = api.call("POST", path, token=tenant.token, raw_body=raw, headers=headers)
        answers[door] = (response.status, response.body)
    answers["stream (Function URL)"] = stream_door(api, tenant, raw, headers)
    return answers


def assert_contract_error(answer: tuple[int, Any], status: int, code: str) -> None:
    got_status, body = answer
    assert got_status == status, body
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def deep(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"d": value}
    return value


POISONED_TURN_BODIES = [
    pytest.param(b"\xff\xfe{\x00}\x00", 400, "invalid_json", id="utf-16 with BOM"),
    pytest.param('{"input": "hi"}'.encode("utf-16-le"), 400, "invalid_json", id="utf-16"),
    pytest.param(b'\xef\xbb\xbf{"input": "hi"}', 400, "invalid_json", id="utf-8 BOM"),
    pytest.param(b'{"input": "caf\xe9"}', 400, "invalid_json", id="latin-1 bytes"),
    pytest.param(b'{"input": "hi", "x": NaN}', 400, "invalid_json", id="NaN"),
    pytest.param(b'{"input": "hi", "x": Infinity}', 400, "invalid_json", id="Infinity"),
    pytest.param(b'{"input": "hi", "x": -Infinity}', 400, "invalid_json", id="-Infinity"),
    pytest.param(b'{"input": "hi", "x": 1e400}', 400, "invalid_json", id="1e400"),
    pytest.param(b'{"input": "hi", "x": ' + b"9" * 400 + b"}", 400, "invalid_json", id="huge int"),
    pytest.param(
        b'{"input": "hi", "x": ' + b"[" * 33 + b"]" * 33 + b"}", 400, "invalid_json", id="33 deep"
    ),
    pytest.param(
        b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "invalid_json", id="100k deep"
    ),
    pytest.param(b'["input"]', 400, "invalid_json", id="array"),
    pytest.param(b"", 400, "invalid_json", id="empty"),
    pytest.param(b'{"input": "hi \\ud800"}', 422, "validation_error", id="lone surrogate in input"),
    pytest.param(
        b'{"input": "hi", "\\udfff": 1}', 422, "validation_error", id="lone surrogate key"
    ),
    pytest.param(
        b'{"input": "' + b"x" * (1024 * 1024) + b'"}', 413, "payload_too_large", id="over 1 MiB"
    ),
]


@pytest.mark.parametrize(("raw", "status", "code"), POISONED_TURN_BODIES)
def test_a_poisoned_turn_body_gets_the_same_error_on_every_door_and_stores_nothing(
    api: InProcessApi, tenant: Tenant, raw: bytes, status: int, code: str
) -> None:
    session_id = open_session(api, tenant)
    before = item_count(api)

    answers = turn_doors(api, tenant, session_id, raw)

    for door, answer in answers.items():
        assert answer[0] == status, (door, answer)
        assert_contract_error(answer, status, code)
    assert len({json.dumps(body, sort_keys=True) for _, body in answers.values()}) == 1
    assert item_count(api) == before


def test_an_escaped_surrogate_pair_is_one_valid_character(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)

    answers = turn_doors(api, tenant, session_id, b'{"input": "smile \\ud83d\\ude00"}')

    assert all(status == 200 for status, _ in answers.values()), answers
    assert "smile \U0001f600" in answers["predict"][1]["output"]


@pytest.mark.parametrize(
    ("key", "status"),
    [("", 422), ("x" * 256, 422), ("caf\xe9", 422), ("tab\there", 422)],
    ids=["empty", "256 chars", "not ASCII", "control character"],
)
def test_a_bad_idempotency_key_is_422_on_every_door(
    api: InProcessApi, tenant: Tenant, key: str, status: int
) -> None:
    session_id = open_session(api, tenant)
    before = item_count(api)

    answers = turn_doors(
        api, tenant, session_id, b'{"input": "hello"}', headers={"Idempotency-Key": key}
    )

    for door, answer in answers.items():
        assert answer[0] == status, (door, answer)
        assert_contract_error(answer, 422, "validation_error")
    assert item_count(api) == before


def test_a_255_character_printable_key_is_accepted_on_every_door(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    # Keys belong to the workspace: one of its own per door.
    keys = iter(f"{door}~" + "k" * 253 for door in range(4))

    for door in ("predict", "predict/stream", f"sessions/{session_id}/messages"):
        path = (
            f"/v1/{door}"
            if door.startswith("sessions")
            else f"/v1/capabilities/cap-generative/{door}"
        )
        response = api.call(
            "POST",
            path,
            token=tenant.token,
            json_body={"input": "hello"},
            headers={"Idempotency-Key": next(keys)},
        )
        assert response.status == 200, (door, response.body)
    status, _ = stream_door(
        api, tenant, b'{"input": "hello"}', headers={"Idempotency-Key": next(keys)}
    )
    assert status == 200


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"metadata": deep(256)}, id="metadata 256 levels deep"),
        pytest.param({"metadata": deep(9)}, id="metadata 9 levels deep"),
        pytest.param({"metadata": {"k": "v" * 8200}}, id="metadata over 8 KiB"),
        pytest.param({"principal": {"user_id": "u\ud800"}}, id="lone surrogate in a claim"),
        pytest.param({"principal": {"\udc00": "x"}}, id="lone surrogate in a claim name"),
        pytest.param({"metadata": {"\ud800": 1}}, id="lone surrogate in a metadata key"),
        pytest.param({"principal": {f"c{i}": "v" for i in range(33)}}, id="33 claims"),
        pytest.param({"principal": {"k" * 65: "v"}}, id="65-char claim name"),
        pytest.param({"principal": {"user": "v" * 1025}}, id="1025-char claim"),
        pytest.param({"principal": {"user": 7}}, id="a claim that is not a string"),
        pytest.param({"externalRef": "r" * 257}, id="257-char externalRef"),
        pytest.param({"externalRef": ""}, id="empty externalRef"),
    ],
)
def test_a_poisoned_session_is_refused_and_the_end_users_list_stays_readable(
    api: InProcessApi, tenant: Tenant, body: dict[str, Any]
) -> None:
    open_session(api, tenant)
    before = item_count(api)
    payload = {"capabilityId": "cap-generative", "externalRef": END_USER, **body}
    # ensure_ascii keeps lone surrogates as \\u escapes, the way an attacker sends them.
    raw = json.dumps(payload).encode()

    created = api.call("POST", "/v1/sessions", token=tenant.token, raw_body=raw)

    assert 400 <= created.status < 500, created.body
    assert created.body["error"]["code"] in ("invalid_json", "validation_error")
    assert item_count(api) == before
    listing = api.call("GET", "/v1/sessions", token=tenant.token, query={"externalRef": END_USER})
    assert listing.status == 200 and len(listing.body["sessions"]) == 1


def test_metadata_at_the_limits_is_accepted(api: InProcessApi, tenant: Tenant) -> None:
    metadata = {"nested": deep(7), "text": "é" * 2000}
    body = {
        "capabilityId": "cap-generative",
        "externalRef": "r" * 256,
        "principal": {f"c{i:02d}" + "k" * 61: "v" * 1024 for i in range(32)},
        "metadata": metadata,
    }

    created = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)

    assert created.status == 201, created.body
    assert created.body["metadata"] == metadata


def test_a_poisoned_patch_is_refused_and_the_session_is_unchanged(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant, metadata={"plan": "gold"})

    for raw in (
        json.dumps({"metadata": deep(300)}).encode(),
        b'{"metadata": {"note": "\\udbff"}}',
        b'{"metadata": {"n": NaN}}',
    ):
        patched = api.call("PATCH", f"/v1/sessions/{session_id}", token=tenant.token, raw_body=raw)
        assert patched.status in (400, 422), patched.body

    read = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
    assert read.status == 200 and read.body["metadata"] == {"plan": "gold"}


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("GET", "/v1/sessions/{bad}", "session_not_found"),
        ("PATCH", "/v1/sessions/{bad}", "session_not_found"),
        ("DELETE", "/v1/sessions/{bad}", "session_not_found"),
        ("GET", "/v1/sessions/{bad}/messages", "session_not_found"),
        ("GET", "/v1/sessions/{bad}/context", "session_not_found"),
        ("POST", "/v1/sessions/{bad}/messages", "session_not_found"),
        ("GET", "/v1/capabilities/{bad}", "capability_not_found"),
        ("POST", "/v1/capabilities/{bad}/predict", "capability_not_found"),
        ("POST", "/v1/capabilities/{bad}/predict/stream", "capability_not_found"),
        ("GET", "/v1/runs/{bad}", "run_not_found"),
    ],
)
@pytest.mark.parametrize("bad", ["x" * 3000, "ses_..%2F..", "caf\u00e9", "a b"])
def test_an_id_that_is_not_plausible_is_404_without_a_store_call(
    api: InProcessApi, tenant: Tenant, method: str, path: str, code: str, bad: str
) -> None:
    sent: list[str] = []
    api.container.infrastructure.clients["dynamodb"].meta.events.register(
        "before-call.dynamodb.*", lambda params, **_: sent.append(str(params))
    )
    body = {"input": "hi", "metadata": {}} if method in ("POST", "PATCH") else None

    response = api.call(method, path.format(bad=bad), token=tenant.token, json_body=body)

    assert response.status == 404, response.body
    assert response.body["error"]["code"] == code
    assert not any(bad[:50] in request for request in sent)


def test_a_very_long_query_value_is_422(api: InProcessApi, tenant: Tenant) -> None:
    for query in (
        {"externalRef": "r" * 257},
        {"externalRef": END_USER, "nextToken": "t" * 5000},
        {"externalRef": END_USER, "whatever": "w" * 5000},
    ):
        response = api.call("GET", "/v1/sessions", token=tenant.token, query=query)
        assert response.status == 422, (query, response.body)
        assert response.body["error"]["code"] == "validation_error"


def test_an_unknown_token_is_401_before_the_body_is_read(api: InProcessApi) -> None:
    response = api.call(
        "POST", "/v1/sessions", token="cm_unknown-token-000000000000", raw_body=b"\xff"
    )

    assert response.status == 401
    assert response.body["error"]["code"] == "unauthorized"


# --------------------------------------------------------------------------- cursors


def page(api: InProcessApi, tenant: Tenant, **query: Any) -> Any:
    return api.call("GET", "/v1/sessions", token=tenant.token, query=query)


def test_a_listing_cursor_carries_no_key_layout_and_no_workspace_id(
    api: InProcessApi, tenant: Tenant
) -> None:
    for _ in range(3):
        open_session(api, tenant)

    token = page(api, tenant, externalRef=END_USER, limit=1).body["nextToken"]

    version, payload, _ = token.split(".")
    position = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert version == "v1" and set(position) == {"createdAt", "id"}
    for secret in (tenant.workspace_id, "WS#", "SESSION#", "gsi1", "pk", END_USER):
        assert secret not in json.dumps(position)


BASE64URL = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"


def test_forged_altered_and_foreign_cursors_are_422(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    for _ in range(3):
        open_session(api, tenant)
    open_session(api, other_tenant)
    token = page(api, tenant, externalRef=END_USER, limit=1).body["nextToken"]
    version, payload, signature = token.split(".")
    forged_position = base64.urlsafe_b64encode(b'{"createdAt":"9","id":"ses_x"}').decode()
    mac = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    altered = base64.urlsafe_b64encode(bytes([mac[0] ^ 1]) + mac[1:]).decode().rstrip("=")
    # The same 32 bytes spelled otherwise: the last character's two unused bits set.
    respelled = signature[:-1] + BASE64URL[BASE64URL.index(signature[-1]) | 1]

    attempts = {
        "garbage": (tenant, END_USER, "garbage!"),
        "old unsigned base64 JSON": (tenant, END_USER, base64.urlsafe_b64encode(b"{}").decode()),
        "forged position": (tenant, END_USER, f"{version}.{forged_position}.{signature}"),
        "altered signature": (tenant, END_USER, f"{version}.{payload}.{altered}"),
        "signature spelled otherwise": (tenant, END_USER, f"{version}.{payload}.{respelled}"),
        "another version": (tenant, END_USER, f"v2.{payload}.{signature}"),
        "another end user": (tenant, "customer-0000", token),
        "another workspace": (other_tenant, END_USER, token),
    }
    for what, (who, ref, cursor) in attempts.items():
        response = page(api, who, externalRef=ref, nextToken=cursor)
        assert response.status == 422, (what, response.body)
        assert response.body["error"]["code"] == "validation_error", what


def test_a_message_cursor_of_another_session_is_422(api: InProcessApi, tenant: Tenant) -> None:
    first, second = open_session(api, tenant), open_session(api, tenant)
    for _ in range(2):
        api.call(
            "POST", f"/v1/sessions/{first}/messages", token=tenant.token, json_body={"input": "q"}
        )
    token = api.call(
        "GET", f"/v1/sessions/{first}/messages", token=tenant.token, query={"limit": 1}
    ).body["nextToken"]

    own = api.call(
        "GET", f"/v1/sessions/{first}/messages", token=tenant.token, query={"nextToken": token}
    )
    foreign = api.call(
        "GET", f"/v1/sessions/{second}/messages", token=tenant.token, query={"nextToken": token}
    )

    assert own.status == 200 and [m["seq"] for m in own.body["messages"]] == [2, 3, 4]
    assert foreign.status == 422 and foreign.body["error"]["code"] == "validation_error"


# --------------------------------------------------------------------------- unexpected failures


def test_an_unexpected_exception_is_500_internal_with_its_request_id_logged(
    api: InProcessApi,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session_id = open_session(api, tenant)

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug nobody foresaw")

    monkeypatch.setattr(api.container.sessions, "get", explode)
    monkeypatch.setattr(api.container.turns, "serve", explode)
    with caplog.at_level(logging.ERROR):
        read = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
        streamed = stream_door(api, tenant, b'{"input": "hi"}')

    for status, body in ((read.status, read.body), streamed):
        assert status == 500
        assert set(body["error"]) == {"code", "message", "requestId"}
        assert body["error"]["code"] == "internal"
        assert "a bug nobody foresaw" not in body["error"]["message"]  # no internals leak
        logged = [r for r in caplog.records if body["error"]["requestId"] in r.getMessage()]
        assert logged and logged[0].exc_info is not None  # with its stack trace


# --------------------------------------------------------------------------- content filters


def test_a_pattern_re2_refuses_is_422_at_capability_creation(
    api: InProcessApi, tenant: Tenant
) -> None:
    for patterns in ([r"(a)\1"], [r"(?=x)"], ["(.*a){300}"], ["p"] * 21):
        created = api.call(
            "POST",
            "/v1/capabilities",
            token=tenant.token,
            json_body={
                "name": "filtered",
                "kind": "generative",
                "contentFilter": {"type": "embedded", "blockedPatterns": patterns},
            },
        )
        assert created.status == 422, (patterns, created.body)
        assert created.body["error"]["code"] == "validation_error"


def test_a_catastrophic_pattern_runs_in_linear_time_and_blocks_no_other_workspace(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    created = api.call(
        "POST",
        "/v1/capabilities",
        token=other_tenant.token,
        json_body={
            "name": "attacker",
            "kind": "generative",
            "contentFilter": {"type": "embedded", "blockedPatterns": ["(a+)+$", "(x+x+)+y"]},
        },
    )
    assert created.status == 201, created.body
    attacker_cap = created.body["id"]
    results: dict[str, Any] = {}

    def attack() -> None:
        # Python's re would need 2^30000 steps here (pytest-timeout would end the test).
        results["attacker"] = api.call(
            "POST",
            f"/v1/capabilities/{attacker_cap}/predict",
            token=other_tenant.token,
            json_body={"input": "a" * 30_000 + "!"},
        )

    import threading

    attacker = threading.Thread(target=attack)
    attacker.start()
    results["victim"] = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body={"input": "Where is order 12345?"},
    )
    attacker.join(60)

    assert not attacker.is_alive()
    assert results["victim"].status == 200 and "order 12345" in results["victim"].body["output"]
    assert results["attacker"].status == 200
    assert results["attacker"].body["withheld"] is False
