"""The serving path through the real handlers, against moto tables built from template.yaml."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.dynamo_meter import DynamoMeter
from tests.support.inprocess_api import InProcessApi, seed_history
from tests.support.tenants import Tenant, open_session, predict, transcript


def test_given_a_session_when_turns_are_sent_then_each_is_recorded_once_in_order(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    first = predict(api, tenant, session_id, "Where is order 12345?")
    second = api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": "Can I still cancel it?"},
    )

    assert first.status == second.status == 200
    assert first.body["turn"] == {"userSeq": 1, "assistantSeq": 2}
    assert second.body["turn"] == {"userSeq": 3, "assistantSeq": 4}
    assert first.body["recorded"] is second.body["recorded"] is True
    messages = transcript(api, tenant, session_id)
    assert [(m["seq"], m["role"]) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    assert messages[0]["content"] == "Where is order 12345?"
    assert messages[3]["content"] == second.body["output"]
    assert "Can I still cancel it?" in second.body["output"]  # the embedded provider echoes input
    assert second.body["context"]["replayedMessages"] == 2
    assert (
        api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body["messageCount"] == 4
    )


def test_stateless_predict_records_nothing(api: InProcessApi, tenant: Tenant) -> None:
    response = predict(api, tenant, None, "hello there")
    assert response.status == 200
    assert response.body["sessionId"] is None and response.body["turn"] is None
    assert response.body["context"] is None and response.body["recorded"] is False
    assert "hello there" in response.body["output"]


def test_classic_capability_predicts_statelessly_and_refuses_sessions(
    api: InProcessApi, tenant: Tenant
) -> None:
    generative_session = open_session(api, tenant)
    ok = predict(api, tenant, None, "I love this product", cap="cap-classic")
    assert ok.status == 200 and "label" in ok.body["output"]

    refused = predict(api, tenant, generative_session, "hi", cap="cap-classic")
    assert refused.status == 409
    assert refused.body["error"]["code"] == "capability_not_conversational"
    assert transcript(api, tenant, generative_session) == []

    create = api.call(
        "POST",
        "/v1/sessions",
        token=tenant.token,
        json_body={"capabilityId": "cap-classic", "externalRef": "x"},
    )
    assert create.status == 409 and create.body["error"]["code"] == "capability_not_conversational"


def test_session_of_another_capability_is_a_mismatch(api: InProcessApi, tenant: Tenant) -> None:
    agent_session = open_session(api, tenant, capability="cap-agent")
    response = predict(api, tenant, agent_session, "hi", cap="cap-generative")
    assert response.status == 409
    assert response.body["error"]["code"] == "session_capability_mismatch"
    assert transcript(api, tenant, agent_session) == []


@pytest.mark.parametrize(
    ("raw", "code"),
    [("{not json", "invalid_json"), ("[1, 2]", "invalid_json"), ("", "invalid_json")],
)
def test_malformed_json_is_400_and_nothing_is_stored(
    api: InProcessApi, tenant: Tenant, raw: str, code: str
) -> None:
    session_id = open_session(api, tenant)
    response = api.call(
        "POST", f"/v1/sessions/{session_id}/messages", token=tenant.token, raw_body=raw
    )
    assert response.status == 400
    assert response.body["error"]["code"] == code
    assert transcript(api, tenant, session_id) == []


@pytest.mark.parametrize(
    "body",
    [
        {"input": 42},
        {},
        {"input": "hi", "sessionId": 7},
        {"input": "hi", "unexpected": True},
        {"input": "   "},
    ],
)
def test_schema_violations_are_422_and_nothing_is_stored(
    api: InProcessApi, tenant: Tenant, body: dict[str, Any]
) -> None:
    session_id = open_session(api, tenant)
    if "sessionId" not in body:
        body = {**body, "sessionId": session_id}
    response = api.call(
        "POST", "/v1/capabilities/cap-generative/predict", token=tenant.token, json_body=body
    )
    assert response.status == 422, response.body
    assert response.body["error"]["code"] == "validation_error"
    assert transcript(api, tenant, session_id) == []


def test_oversized_input_is_413_and_nothing_is_stored(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    limit = api.container.settings.max_input_chars
    response = predict(api, tenant, session_id, "x" * (limit + 1))
    assert response.status == 413
    assert response.body["error"]["code"] == "payload_too_large"
    assert transcript(api, tenant, session_id) == []
    assert predict(api, tenant, session_id, "x" * limit).status == 200


def test_unknown_ids_are_404(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    assert (
        predict(api, tenant, None, "hi", cap="cap-nope").body["error"]["code"]
        == "capability_not_found"
    )
    missing = predict(api, tenant, "ses_missing", "hi")
    assert missing.status == 404 and missing.body["error"]["code"] == "session_not_found"
    door = api.call(
        "POST", "/v1/sessions/ses_missing/messages", token=tenant.token, json_body={"input": "hi"}
    )
    assert door.status == 404 and door.body["error"]["code"] == "session_not_found"
    assert (
        api.call("GET", "/v1/runs/run_missing", token=tenant.token).body["error"]["code"]
        == "run_not_found"
    )
    assert transcript(api, tenant, session_id) == []


def test_replay_window_bounds_what_the_turn_sees(api: InProcessApi, tenant: Tenant) -> None:
    created = api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={
            "name": "small",
            "kind": "generative",
            "replay": {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1},
        },
    )
    assert created.status == 201, created.body
    cap = created.body["id"]
    session_id = open_session(api, tenant, capability=cap)
    for i in range(4):
        assert predict(api, tenant, session_id, f"turn {i}", cap=cap).status == 200
    context = api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token).body
    assert [m["seq"] for m in context["messages"]] == [5, 6, 7, 8]
    assert context["omittedMessages"] == 4
    assert context["replayedChars"] == sum(len(m["content"]) for m in context["messages"])
    turn = predict(api, tenant, session_id, "next", cap=cap).body
    assert turn["context"]["replayedMessages"] == 4
    assert turn["context"]["omittedMessages"] == 4


def test_archived_session_refuses_turns_but_stays_readable(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    predict(api, tenant, session_id, "before archive")
    api.container.infrastructure.clients["dynamodb"].update_item(
        TableName=api.container.settings.table_name,
        Key={"pk": {"S": f"SESSION#{session_id}"}, "sk": {"S": "SESSION"}},
        UpdateExpression="SET #s = :a",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":a": {"S": "archived"}},
    )
    refused = predict(api, tenant, session_id, "after archive")
    assert refused.status == 409 and refused.body["error"]["code"] == "session_archived"
    assert (
        api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body["status"]
        == "archived"
    )
    assert len(transcript(api, tenant, session_id)) == 2


def test_agent_turn_keeps_a_fenced_digest_and_a_trace_with_the_principal(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(
        api, tenant, capability="cap-agent", principal={"tenant_id": "store-a", "user_id": "u_913"}
    )
    first = predict(api, tenant, session_id, "Where is order 12345?", cap="cap-agent")
    assert first.status == 200 and first.body["runId"]
    context = api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token).body
    assert len(context["toolDigests"]) == 1
    digest = context["toolDigests"][0]
    assert digest["seq"] == first.body["turn"]["assistantSeq"]
    assert "lookup_order" in digest["tools"] and "12345" in digest["text"]
    run = api.call("GET", f"/v1/runs/{first.body['runId']}", token=tenant.token).body
    assert run["principal"] == {"tenant_id": "store-a", "user_id": "u_913"}
    assert run["steps"][0]["tool"] == "lookup_order"
    # Deleting the conversation never deletes the trace.
    assert api.call("DELETE", f"/v1/sessions/{session_id}", token=tenant.token).status == 204
    assert api.call("GET", f"/v1/runs/{first.body['runId']}", token=tenant.token).status == 200
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 404


def test_a_warm_turn_reads_once_writes_once_and_reads_do_not_grow_with_history(
    api: InProcessApi, tenant: Tenant
) -> None:
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])
    figures = {}
    for history in (100, 1000):
        session_id = open_session(api, tenant)
        seed_history(api, session_id, history)
        predict(api, tenant, session_id, "warm-up")  # warms the capability cache
        meter.reset()
        response = predict(api, tenant, session_id, "and what about the other one?")
        assert response.status == 200 and response.body["turn"]["userSeq"] == history + 3
        figures[history] = (dict(meter.requests), meter.items_read, meter.bytes_read)
        # One read of the window, one conditional put of the turn, and the workspace's
        # turn counter (WorkspaceTurnsPerSecond): nothing else.
        assert meter.requests == {"Query": 1, "PutItem": 1, "UpdateItem": 1}, meter.requests

    items_100, bytes_100 = figures[100][1:]
    items_1000, bytes_1000 = figures[1000][1:]
    # maxMessages / 2 turns + head + summary: with no summary yet, that slot holds one
    # older turn.
    assert items_100 == items_1000 == 20 // 2 + 2
    # The same bytes: the head's copies of the count move only once per granularity.
    assert bytes_1000 == bytes_100


def test_the_messages_door_also_reads_once_when_warm(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": "one"},
    )
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])
    response = api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": "two"},
    )
    assert response.status == 200
    assert meter.requests == {"Query": 1, "PutItem": 1, "UpdateItem": 1}  # + the turn counter
