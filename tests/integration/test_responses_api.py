"""The Responses door on the in-process stack over moto: through API Gateway (a stream
all at once) and the streaming Function URL's door (as made); what a turn through it
costs in DynamoDB requests beside the same turn through predict; a stored response
found with one BatchGetItem and deleted with one conditional write; a conversation
bound once by a conditional write."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.dynamo_meter import DynamoMeter
from tests.support.inprocess_api import InProcessApi
from tests.support.responses_door import ask, respond_http, respond_stream_door, text_of
from tests.support.tenants import Tenant, transcript

DOORS = [
    pytest.param(respond_http, id="HttpApi"),
    pytest.param(respond_stream_door, id="Function URL"),
]


def meter_of(api: InProcessApi) -> DynamoMeter:
    return DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])


@pytest.mark.parametrize("door", DOORS)
def test_a_chain_through_either_door_is_one_conversation(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    first = door(api, tenant, {"model": "cap-generative", "input": "My name is Ada."})
    assert first.status == 200, first.body
    previous = first.body["id"]
    body = {"model": "cap-generative", "input": "Who am I?", "previous_response_id": previous}

    second = door(api, tenant, body)

    assert second.status == 200, second.body
    session_id = first.body["conversation"]["id"]
    assert second.body["conversation"]["id"] == session_id
    assert [m["content"] for m in transcript(api, tenant, session_id)][::2] == [
        "My name is Ada.",
        "Who am I?",
    ]


@pytest.mark.parametrize("door", DOORS)
def test_a_stream_through_either_door_numbers_its_events(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    answer = door(api, tenant, {"model": "cap-generative", "input": "Hi.", "stream": True})

    assert answer.status == 200
    events = answer.body
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert text_of(events[-1]["response"]) == "".join(
        e["delta"] for e in events if e["type"] == "response.output_text.delta"
    )


def predict(api: InProcessApi, tenant: Tenant, session_id: str, text: str) -> None:
    body = {"input": text, "sessionId": session_id}
    path = "/v1/capabilities/cap-generative/predict"
    assert api.call("POST", path, token=tenant.token, json_body=body).status == 200


def test_a_turn_through_this_door_costs_what_the_same_turn_through_predict_costs(
    api: InProcessApi, tenant: Tenant
) -> None:
    conversation = ask(api, tenant, "Hello there.", user="cost-1")["conversation"]["id"]
    body = {"capabilityId": "cap-generative", "externalRef": "cost-2"}
    session = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body).body["id"]
    predict(api, tenant, session, "Hello there.")
    meter = meter_of(api)

    ask(api, tenant, "How are you?", conversation=conversation)
    through_responses = (dict(meter.requests), meter.items_read)
    meter.reset()
    predict(api, tenant, session, "How are you?")

    assert through_responses == (dict(meter.requests), meter.items_read)


def test_a_stored_response_is_read_with_one_request_and_deleted_with_one(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = ask(api, tenant, "One.")
    second = ask(api, tenant, "Two.", previous_response_id=first["id"])
    meter = meter_of(api)

    read = api.call("GET", f"/v1/responses/{second['id']}", token=tenant.token)

    assert read.status == 200 and read.body["previous_response_id"] == first["id"]
    assert meter.requests == {"BatchGetItem": 1}
    meter.reset()
    deleted = api.call("DELETE", f"/v1/responses/{second['id']}", token=tenant.token)
    assert deleted.status == 200 and deleted.body == {
        "id": second["id"],
        "object": "response",
        "deleted": True,
    }
    assert meter.requests == {"BatchGetItem": 1, "UpdateItem": 1}
    gone = api.call("GET", f"/v1/responses/{second['id']}", token=tenant.token)
    assert gone.status == 404 and gone.body["error"]["code"] == "response_not_found"
    session_id = first["conversation"]["id"]
    assert len(transcript(api, tenant, session_id)) == 4  # its turn stays


def test_a_conversation_is_bound_once_by_a_conditional_write(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    created = api.call(
        "POST",
        "/v1/conversations",
        token=tenant.token,
        json_body={"items": [{"type": "message", "role": "user", "content": "I am Ada."}]},
    )
    assert created.status == 200, created.body
    conversation = created.body["id"]
    meter = meter_of(api)

    first = ask(api, tenant, "Who am I?", conversation=conversation, user="ada")

    assert meter.requests["UpdateItem"] >= 1  # the binding, conditional on no capability yet
    assert first["conversation"]["id"] == conversation
    refused = respond_http(
        api, tenant, {"model": "cap-agent", "input": "x", "conversation": conversation}
    )
    assert refused.status == 409
    assert refused.body["error"]["code"] == "session_capability_mismatch"
    foreign = respond_http(
        api, other_tenant, {"model": "cap-generative", "input": "x", "conversation": conversation}
    )
    assert foreign.status == 404
    session = api.call("GET", f"/v1/sessions/{conversation}", token=tenant.token).body
    assert (session["capabilityId"], session["externalRef"]) == ("cap-generative", "ada")
    query = {"externalRef": "ada"}
    listed = api.call("GET", "/v1/sessions", token=tenant.token, query=query).body
    assert [s["id"] for s in listed["sessions"]] == [conversation]


@pytest.mark.parametrize("door", DOORS)
def test_an_idempotency_key_replays_the_same_response_once_recorded(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    body = {"model": "cap-generative", "input": "Only once."}
    headers = {"Idempotency-Key": f"resp-idem-{door.__name__}"}

    first = door(api, tenant, body, headers)
    again = door(api, tenant, body, headers)

    assert first.status == again.status == 200
    assert again.body["id"] == first.body["id"] and text_of(again.body) == text_of(first.body)
    session_id = first.body["conversation"]["id"]
    messages = transcript(api, tenant, session_id)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "Only once."


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_a_paused_response_is_retrievable_while_it_waits_and_its_calls_are_answered_once(
    api: InProcessApi, tenant: Tenant
) -> None:
    paused = ask(api, tenant, "What does get_weather say?", tools=[WEATHER], user="u1")
    [call] = paused["output"]
    assert call["type"] == "function_call"
    path = f"/v1/responses/{paused['id']}"
    # (v5) While it waits it reads back as it was answered: its calls, with their ids.
    waiting = api.call("GET", path, token=tenant.token)
    assert waiting.status == 200, waiting.body
    assert (waiting.body["status"], waiting.body["output"]) == ("completed", [call])
    for method, where in (("DELETE", path), ("GET", f"{path}/input_items")):
        refused = api.call(method, where, token=tenant.token)
        assert refused.status == 404, (method, where, refused.body)
        assert refused.body["error"]["code"] == "response_not_found"
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "24C"}
    continued = {"input": [output], "previous_response_id": paused["id"], "tools": [WEATHER]}

    answer = respond_http(api, tenant, {"model": "cap-generative", **continued})

    assert answer.status == 200, answer.body
    read = api.call("GET", f"/v1/responses/{answer.body['id']}", token=tenant.token)
    assert read.status == 200 and read.body["previous_response_id"] == paused["id"]
    again = respond_http(api, tenant, {"model": "cap-generative", **continued})
    assert again.status == 409 and again.body["error"]["code"] == "tool_calls_mismatch"
    assert len(transcript(api, tenant, paused["conversation"]["id"])) == 2
