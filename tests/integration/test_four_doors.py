"""One table of bad inputs through all four doors (predict, its streaming twin, the
session's message route and the OpenAI-compatible chat completions), each door on the
HttpApi and, where it streams, on the Function URL: the same status and the same error
body everywhere (the OpenAI-compatible door's body adds only ``type``), and nothing
stored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fakes.adapters import FakeClock
from tests.support import fake_aws
from tests.support.chat_door import chat_http, chat_stream_door
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant, open_session

GENERATIVE = "cap-generative"
OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass
class Turn:
    """What a row asks of a turn, each door spelling it its own way."""

    text: str = "hi"
    session: str | None = None  # "open", "archived", "missing" or None (stateless)
    capability: str = GENERATIVE
    raw: bytes | None = None  # sent as it is to every door (the input gate's rows)
    headers: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # instead of the tenant's


@dataclass
class Row:
    name: str
    turn: Turn
    status: int
    code: str
    # The doors that can take the row (the message door has no capability to name).
    doors: tuple[str, ...] = ("predict", "stream", "stream-url", "messages", "chat", "chat-url")


def session_for(api: InProcessApi, tenant: Tenant, turn: Turn, capability: str) -> str | None:
    if turn.session is None:
        return None
    if turn.session == "missing":
        return "ses_0000missing"
    session_id = open_session(api, tenant, capability)
    if turn.session == "archived":
        api.container.infrastructure.clients["dynamodb"].update_item(
            TableName=api.container.settings.table_name,
            Key={"pk": {"S": f"SESSION#{session_id}"}, "sk": {"S": "SESSION"}},
            UpdateExpression="SET #s = :a",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":a": {"S": "archived"}},
        )
    return session_id


def through(
    door: str, api: InProcessApi, tenant: Tenant, turn: Turn, session_id: str | None
) -> tuple[int, dict[str, str], Any]:
    """One door's answer: status, headers (lower-cased), error body."""
    caller = Tenant(tenant.workspace_id, turn.token or tenant.token)
    if door.startswith("chat"):
        body: Any = {"model": turn.capability, "messages": [{"role": "user", "content": turn.text}]}
        headers = dict(turn.headers)
        if session_id is not None:
            headers["X-Convo-Session-Id"] = session_id
        call = chat_http if door == "chat" else chat_stream_door
        answer = call(api, caller, body, headers, raw=turn.raw)
        return answer.status, _lower(answer.headers), answer.body
    body = {"input": turn.text}
    path = f"/v1/capabilities/{turn.capability}/predict"
    if door == "messages":
        path = f"/v1/sessions/{session_id}/messages"
    elif session_id is not None:
        body["sessionId"] = session_id
    if door.startswith("stream"):
        path += "/stream"
    raw = turn.raw if turn.raw is not None else json.dumps(body).encode()
    if door == "stream-url":
        answer = chat_stream_door(api, caller, None, turn.headers, raw=raw, path=path)
        return answer.status, _lower(answer.headers), answer.body
    response = api.call("POST", path, token=caller.token, raw_body=raw, headers=turn.headers)
    return response.status, _lower(response.headers), response.body


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


ROWS = [
    Row("not JSON", Turn(raw=b'{"input": hi'), 400, "invalid_json"),
    Row("not an object", Turn(raw=b'["hi"]'), 400, "invalid_json"),
    Row("NaN", Turn(raw=b'{"x": NaN}'), 400, "invalid_json"),
    Row("33 levels deep", Turn(raw=b'{"x": ' + b"[" * 33 + b"]" * 33 + b"}"), 400, "invalid_json"),
    Row("a lone surrogate", Turn(raw=b'{"x": "\\ud800"}'), 422, "validation_error"),
    Row(
        "over 1 MiB", Turn(raw=b'{"x": "' + b"x" * (1024 * 1024) + b'"}'), 413, "payload_too_large"
    ),
    Row("an empty Idempotency-Key", Turn(headers={"Idempotency-Key": ""}), 422, "validation_error"),
    Row("an unknown token", Turn(token="no-such-token"), 401, "unauthorized"),
    Row("an empty input", Turn(text="   "), 422, "validation_error"),
    Row("an input over the limit", Turn(text="x" * 32_001), 413, "payload_too_large"),
    Row("an unknown session", Turn(session="missing"), 404, "session_not_found"),
    Row("an archived session", Turn(session="archived"), 409, "session_archived"),
    Row(
        "an unknown capability",
        Turn(capability="cap-nothing-here"),
        404,
        "capability_not_found",
        doors=("predict", "stream", "stream-url", "chat", "chat-url"),
    ),
    Row(
        "a session on a classic capability",
        Turn(capability="cap-classic", session="open"),
        409,
        "capability_not_conversational",
        doors=("predict", "stream", "stream-url", "chat", "chat-url"),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_the_same_bad_input_gets_the_same_answer_through_every_door(
    api: InProcessApi, tenant: Tenant, row: Row
) -> None:
    # The classic row's session is opened on the generative capability (a classic one
    # takes none), and the turn names the classic capability.
    capability = GENERATIVE if row.turn.capability == "cap-classic" else row.turn.capability
    session_id = session_for(api, tenant, row.turn, capability)
    before = fake_aws.item_count(
        api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
    )

    answers = {door: through(door, api, tenant, row.turn, session_id) for door in row.doors}

    native = answers["predict"]
    assert native[0] == row.status and native[2]["error"]["code"] == row.code, native
    for door, (status, headers, body) in answers.items():
        assert status == row.status, (door, body)
        if door.startswith("chat"):
            assert body["error"].pop("type") == OPENAI_TYPES[row.status], door
            if row.status == 422:
                # (v5) Every 422 of the OpenAI doors names its field, in OpenAI's form:
                # the code is the same, the words name the chat door's own field.
                assert body["error"]["param"] and body["error"]["code"] == row.code, door
                continue
        assert body == native[2], door
        assert headers.get("retry-after") == native[1].get("retry-after"), door
    assert (
        fake_aws.item_count(
            api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
        )
        == before
    )


def test_a_reused_idempotency_key_is_the_same_refusal_on_every_door(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    answers = {}
    for door in ("predict", "stream", "stream-url", "messages", "chat", "chat-url"):
        key = {"Idempotency-Key": f"reused-{door}"}
        first = through(door, api, tenant, Turn(text="first", headers=key), session_id)
        assert first[0] == 200, (door, first)
        answers[door] = through(door, api, tenant, Turn(text="other", headers=key), session_id)

    native = answers["predict"]
    assert native[0] == 422 and native[2]["error"]["code"] == "idempotency_key_reused"
    for door, (status, _, body) in answers.items():
        if door.startswith("chat"):
            assert body["error"].pop("type") == "invalid_request_error"
        assert (status, body) == (native[0], native[2]), door


def test_over_the_rate_limit_every_door_is_429_with_retry_after(backend: AwsBackend) -> None:
    limited = {"WORKSPACE_TURNS_PER_SECOND": "1", "WORKSPACE_TURN_BURST": "1"}
    # A clock that stands still: the one turn of burst is never refilled.
    with serving(backend, limited, clock=FakeClock()) as api:
        tenant = Tenant(*new_workspace(api, "limited"))
        assert through("predict", api, tenant, Turn(), None)[0] == 200
        answers = {
            door: through(door, api, tenant, Turn(), None)
            for door in ("predict", "stream", "stream-url", "chat", "chat-url")
        }

    native = answers["predict"]
    assert native[0] == 429 and native[2]["error"]["code"] == "rate_limited"
    for door, (status, headers, body) in answers.items():
        if door.startswith("chat"):
            assert body["error"].pop("type") == "rate_limit_error"
        assert (status, body) == (native[0], native[2]), door
        assert int(headers["retry-after"]) >= 1, door
