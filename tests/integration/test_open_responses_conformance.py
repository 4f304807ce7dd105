"""Every Response and streaming event the Responses door makes conforms to the Open
Responses specification's required fields and types (``tests.support.open_responses``,
written from the specification): answered, retrieved, streamed through either door,
paused for the app's tools (and retrieved while it waits), withheld (incomplete),
under structured output, and a stream that fails after it began."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.turns import AnswerDelta, TurnBegun
from convo_memory.doors.response_frames import ResponseEcho, ResponseEvents
from tests.support.inprocess_api import InProcessApi
from tests.support.open_responses import event_problems, problems
from tests.support.responses_door import respond_http, respond_stream_door
from tests.support.tenants import Tenant

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FORECAST = {
    "type": "json_schema",
    "name": "forecast",
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
BODIES = [
    pytest.param({"input": "Hi."}, id="answered"),
    pytest.param({"input": "What does get_weather say?", "tools": [WEATHER]}, id="paused"),
    pytest.param({"input": "Oslo?", "text": {"format": FORECAST}}, id="structured"),
    pytest.param({"input": "Hi.", "store": False, "temperature": 0.2}, id="unstored"),
]


def responses_of(api: InProcessApi, tenant: Tenant, body: dict[str, Any]) -> list[Any]:
    """The Response a request makes (POST), read back (GET, when stored), and the events
    of the same request streamed through both doors."""
    made = []
    answered = respond_http(api, tenant, {"model": "cap-generative", **body})
    assert answered.status == 200, answered.body
    made.append(answered.body)
    if body.get("store") is not False:
        read = api.call("GET", f"/v1/responses/{answered.body['id']}", token=tenant.token)
        assert read.status == 200, read.body
        made.append(read.body)
    for door in (respond_http, respond_stream_door):
        streamed = door(api, tenant, {"model": "cap-generative", "stream": True, **body})
        assert streamed.status == 200, streamed.body
        made.extend(streamed.body)
    return made


@pytest.mark.parametrize("body", BODIES)
def test_every_response_and_event_has_the_fields_the_specification_requires(
    api: InProcessApi, tenant: Tenant, body: dict[str, Any]
) -> None:
    made = responses_of(api, tenant, body)

    found = [
        entry
        for value in made
        for entry in (event_problems(value) if "sequence_number" in value else problems(value))
    ]
    assert found == []
    final = made[0]
    assert isinstance(final["completed_at"], int) and final["completed_at"] >= final["created_at"]
    assert (final["presence_penalty"], final["frequency_penalty"]) == (0, 0)
    assert final["temperature"] == body.get("temperature", 1)


def test_a_withheld_answer_is_an_incomplete_response_of_the_specification(
    api: InProcessApi, tenant: Tenant
) -> None:
    capability = {
        "name": "filtered",
        "kind": "generative",
        "provider": {"type": "embedded"},
        "contentFilter": {"type": "embedded", "blockedTerms": ["forbidden"]},
    }
    created = api.call("POST", "/v1/capabilities", token=tenant.token, json_body=capability)
    assert created.status == 201, created.body
    body = {"model": created.body["id"], "input": "Say forbidden.", "stream": True}

    events = respond_http(api, tenant, body).body

    assert events[-1]["type"] == "response.incomplete"
    assert [entry for event in events for entry in event_problems(event)] == []


def test_a_stream_that_fails_after_it_began_conforms_and_closes_its_item() -> None:
    stream = ResponseEvents(ResponseEcho(model="cap"))
    begun = TurnBegun("ab12cd34ef56ab78", 1, "ses_0123456789abcdef0123", 1)

    frames = list(stream.frames([begun, AnswerDelta("Half an "), ProviderError("down")]))

    events = [json.loads(frame.split("data: ", 1)[1]) for frame in frames]
    assert [entry for event in events for entry in event_problems(event)] == []
    assert [e["type"] for e in events[-2:]] == ["response.output_item.done", "response.failed"]
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Half an "
