"""The app's own tools through the OpenAI-compatible door on the in-process stack (the
real handlers, DynamoDB on moto, the embedded model's rule: it calls each offered tool
whose name occurs in the input): a turn pauses, is continued (the history resent, as
SDKs do) and recorded once; the refusals; streaming through both doors; exactly once
under races, retries and failed writes; what each step costs in DynamoDB requests."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest

from tests.support import fake_aws
from tests.support.agent_api import run_retention
from tests.support.chat_door import (
    WEATHER_TOOL,
    DoorAnswer,
    chat_body,
    chat_http,
    chat_stream_door,
    keyed,
    user,
)
from tests.support.dynamo_meter import DynamoMeter
from tests.support.faults import dynamodb_error, inject, is_turn_put
from tests.support.inprocess_api import InProcessApi
from tests.support.repair_jobs import drain_repairs
from tests.support.tenants import Tenant, transcript

DOORS = [pytest.param(chat_http, id="HttpApi"), pytest.param(chat_stream_door, id="Function URL")]
MODEL = "cap-generative"
TOOLS = [WEATHER_TOOL]
ASK = "What does get_weather say about Paris?"


def turn(
    api: InProcessApi,
    tenant: Tenant,
    key: str,
    *messages: dict[str, Any],
    door: Any = chat_http,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> DoorAnswer:
    body = chat_body(MODEL, *messages, user="customer-9", tools=TOOLS, **extra)
    return door(api, tenant, body, {**keyed(key), **(headers or {})})


def calls_of(answer: DoorAnswer) -> list[dict[str, Any]]:
    return list(answer.body["choices"][0]["message"].get("tool_calls") or [])


def resent(pause: DoorAnswer, *results: tuple[str, str]) -> list[dict[str, Any]]:
    """The history an SDK sends to continue: the question, the calls, the results."""
    message = pause.body["choices"][0]["message"]
    return [
        user(ASK),
        {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
        *({"role": "tool", "tool_call_id": i, "content": r} for i, r in results),
    ]


def context(api: InProcessApi, tenant: Tenant, session_id: str) -> Any:
    return api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token).body


def items(api: InProcessApi) -> int:
    return fake_aws.item_count(
        api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
    )


# -- pause and continue ------------------------------------------------------------------------


def test_a_turn_pauses_for_the_apps_tool_and_its_continuation_is_recorded_once(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-a", user(ASK))

    assert pause.status == 200, pause.body
    assert pause.body["choices"][0]["finish_reason"] == "tool_calls"
    [call] = calls_of(pause)
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"query": ASK}
    assert pause.body["convo"]["turn"] is None and pause.body["convo"]["recorded"] is False
    session_id = pause.session_id
    assert session_id is not None
    waiting = context(api, tenant, session_id)["pendingTurn"]
    assert waiting["userSeq"] == 1 and [c["id"] for c in waiting["toolCalls"]] == [call["id"]]
    assert transcript(api, tenant, session_id) == []

    done = turn(api, tenant, "conv-a", *resent(pause, (call["id"], "sunny, 24C")))

    assert done.status == 200, done.body
    assert done.body["choices"][0]["finish_reason"] == "stop"
    assert '"sunny, 24C"' in done.body["choices"][0]["message"]["content"]
    assert done.body["convo"]["turn"] == {"userSeq": 1, "assistantSeq": 2}
    messages = transcript(api, tenant, session_id)
    assert [(m["role"], m["content"] == ASK, m["abandoned"]) for m in messages] == [
        ("user", True, False),
        ("assistant", False, False),
    ]
    after = context(api, tenant, session_id)
    assert after["pendingTurn"] is None
    prompt = api.call("GET", f"/v1/sessions/{session_id}/messages/2/prompt", token=tenant.token)
    assert prompt.body["appTools"] == ["get_weather"] and prompt.body["input"] == ASK

    later = turn(api, tenant, "conv-a", user("What did the weather tool say?"))
    assert "tool results from 1 earlier turn" in later.body["choices"][0]["message"]["content"]
    sent = api.call("GET", f"/v1/sessions/{session_id}/messages/4/prompt", token=tenant.token)
    [digest] = sent.body["toolDigests"]
    assert digest["tools"] == ["get_weather"] and "sunny, 24C" in digest["text"]


def test_results_that_answer_other_calls_are_409_and_change_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-b", user(ASK))
    before = items(api)

    wrong = turn(api, tenant, "conv-b", *resent(pause, ("call_nope", "sunny")))
    assert wrong.status == 409
    assert wrong.body["error"]["code"] == "tool_calls_mismatch"
    assert wrong.body["error"]["type"] == "conflict_error"
    assert wrong.headers.get("x-should-retry") == "false"
    assert items(api) == before
    assert context(api, tenant, pause.session_id or "")["pendingTurn"] is not None


def test_a_new_user_message_records_the_waiting_turn_as_abandoned(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-c", user(ASK))
    fresh = turn(api, tenant, "conv-c", user("Forget it, hello."))

    assert fresh.body["convo"]["turn"] == {"userSeq": 3, "assistantSeq": 4}
    messages = transcript(api, tenant, pause.session_id or "")
    assert [(m["seq"], m["abandoned"]) for m in messages] == [
        (1, False),
        (2, True),
        (3, False),
        (4, False),
    ]
    assert messages[1]["content"] == ""


def test_the_retention_run_records_a_pause_left_waiting_as_abandoned(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-d", user(ASK))
    session_id = pause.session_id or ""

    report = run_retention(api, datetime.now(UTC) + timedelta(seconds=901))

    assert report["pausesAbandoned"] >= 1  # this module's other waiting turns too
    assert [m["abandoned"] for m in transcript(api, tenant, session_id)] == [False, True]
    [call] = calls_of(pause)
    late = turn(api, tenant, "conv-d", *resent(pause, (call["id"], "sunny")))
    assert late.status == 409 and late.body["error"]["code"] == "tool_calls_mismatch"


@pytest.mark.parametrize("door", DOORS)
def test_a_streamed_pause_arrives_as_tool_call_chunks(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    key = f"conv-stream-{door.__name__}"
    pause = turn(api, tenant, key, user(ASK), door=door, stream=True)

    assert pause.status == 200, pause.body
    chunks = [line for line in pause.body if isinstance(line, dict)]
    pieces = [
        piece for chunk in chunks for piece in chunk["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert pieces[0]["index"] == 0 and pieces[0]["function"]["name"] == "get_weather"
    call_id = pieces[0]["id"]
    arguments = "".join(p["function"]["arguments"] for p in pieces)
    assert json.loads(arguments) == {"query": ASK}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert pause.body[-1] == "[DONE]"

    history: list[dict[str, Any]] = [
        user(ASK),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "windy"},
    ]
    done = turn(api, tenant, key, *history, door=door, stream=True)
    text = "".join(
        line["choices"][0]["delta"].get("content") or ""
        for line in done.body
        if isinstance(line, dict)
    )
    assert '"windy"' in text


def test_a_stateless_call_passes_tools_through_and_opens_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    before = items(api)
    body = chat_body(MODEL, user(ASK), tools=TOOLS)
    pause = chat_http(api, tenant, body)
    [call] = calls_of(pause)
    assert pause.body["convo"]["sessionId"] is None

    history: list[dict[str, Any]] = [
        user(ASK),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "foggy"},
    ]
    done = chat_http(api, tenant, chat_body(MODEL, *history, tools=TOOLS))

    assert done.status == 200 and '"foggy"' in done.body["choices"][0]["message"]["content"]
    assert items(api) == before


FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["C", "F"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("door", DOORS)
def test_structured_output_on_the_embedded_connection_is_json_of_its_schema(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": FORECAST}}
    ask = "Paris for 3 days"
    keyed_body = chat_body(MODEL, user(ask), user="customer-9", response_format=schema_format)
    answer = door(api, tenant, keyed_body, keyed(f"conv-json-{door.__name__}"))
    stateless = chat_body(MODEL, user(ask), response_format={"type": "json_object"})
    plain = door(api, tenant, stateless)

    assert answer.status == 200, answer.body
    forecast = json.loads(answer.body["choices"][0]["message"]["content"])
    jsonschema.validate(forecast, FORECAST)
    assert forecast == {"city": ask, "days": 3, "unit": "C"}  # the input's words and number
    assert answer.body["convo"]["recorded"] is True
    as_object = json.loads(plain.body["choices"][0]["message"]["content"])
    assert isinstance(as_object, dict) and ask in as_object["answer"]


def test_an_app_tool_named_like_the_agents_own_is_422(api: InProcessApi, tenant: Tenant) -> None:
    clash = [{"type": "function", "function": {"name": "lookup_order"}}]
    body = chat_body("cap-agent", user("hi"), user="customer-9", tools=clash)
    answer = chat_http(api, tenant, body, keyed("conv-clash"))
    assert answer.status == 422 and "lookup_order" in answer.body["error"]["message"]


# -- exactly once ---------------------------------------------------------------------------------


def test_racing_continuations_record_one_turn_and_the_other_is_409(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-race", user(ASK))
    [call] = calls_of(pause)
    answers: list[DoorAnswer] = []

    def continue_with(result: str) -> None:
        answers.append(turn(api, tenant, "conv-race", *resent(pause, (call["id"], result))))

    racers = [threading.Thread(target=continue_with, args=(r,)) for r in ("rain", "snow")]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()

    assert sorted(a.status for a in answers) == [200, 409]
    assert len(transcript(api, tenant, pause.session_id or "")) == 2


def test_an_idempotency_key_on_a_continuation_replays_it(api: InProcessApi, tenant: Tenant) -> None:
    pause = turn(api, tenant, "conv-idem", user(ASK))
    [call] = calls_of(pause)
    key = {"Idempotency-Key": "continue-once"}

    first = turn(api, tenant, "conv-idem", *resent(pause, (call["id"], "hail")), headers=key)
    again = turn(api, tenant, "conv-idem", *resent(pause, (call["id"], "hail")), headers=key)

    assert first.status == again.status == 200
    assert again.body == first.body
    assert len(transcript(api, tenant, pause.session_id or "")) == 2


def test_a_continued_turn_whose_write_fails_is_repaired_at_its_position(
    api: InProcessApi, tenant: Tenant
) -> None:
    pause = turn(api, tenant, "conv-repair", user(ASK))
    [call] = calls_of(pause)
    client = api.container.infrastructure.clients["dynamodb"]
    remove = inject(
        client,
        "PutItem",
        lambda p: dynamodb_error("InternalServerError", 500) if is_turn_put(p) else None,
    )
    done = turn(api, tenant, "conv-repair", *resent(pause, (call["id"], "clear")))
    remove()

    assert done.status == 200 and done.body["convo"]["recorded"] is False
    records = drain_repairs(api)
    assert len(records) == 1
    assert api.invoke("RepairFunction", {"Records": records}) == {"batchItemFailures": []}
    assert api.invoke("RepairFunction", {"Records": records}) == {"batchItemFailures": []}
    messages = transcript(api, tenant, pause.session_id or "")
    assert [m["seq"] for m in messages] == [1, 2]
    assert messages[1]["content"] == done.body["choices"][0]["message"]["content"]


# -- what it costs ----------------------------------------------------------------------------------


def test_a_turn_offered_app_tools_costs_what_any_turn_costs_and_a_pause_one_write(
    api: InProcessApi, tenant: Tenant
) -> None:
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])

    def measured(
        key: str, *messages: dict[str, Any], tools: bool = True
    ) -> tuple[dict[str, int], int]:
        meter.reset()
        extra = {"tools": TOOLS} if tools else {}
        body = chat_body(MODEL, *messages, user="customer-9", **extra)
        assert chat_http(api, tenant, body, keyed(key)).status == 200
        return dict(meter.requests), meter.bytes_read

    for key in ("cost-plain", "cost-tools"):  # two sessions of the same shape
        measured(key, user("Hello there."), tools=False)
    plain = measured("cost-plain", user("How are you?"), tools=False)
    offered = measured("cost-tools", user("How are you?"))
    assert offered == plain

    measured("cost-pause", user("Hello there."))
    before_pause = measured("cost-pause", user("How are you?"))
    paused = measured("cost-pause", user(ASK))
    assert paused[0] == before_pause[0]  # the pause's write takes the turn's place
    assert paused[0]["PutItem"] == 1


def test_a_later_turn_reads_a_window_full_of_tool_digests_in_two_requests_at_most(
    api: InProcessApi, tenant: Tenant
) -> None:
    for _ in range(12):  # more turns than the window holds, each with its digest
        pause = turn(api, tenant, "conv-digests", user(ASK))
        [call] = calls_of(pause)
        turn(api, tenant, "conv-digests", *resent(pause, (call["id"], "sunny")))
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])

    later = turn(api, tenant, "conv-digests", user("And now?"))

    assert later.body["convo"]["turn"] == {"userSeq": 25, "assistantSeq": 26}
    assert meter.requests["Query"] <= 2
    prompt = api.call(
        "GET",
        f"/v1/sessions/{later.session_id}/messages/25/prompt",
        token=tenant.token,
    )
    # The whole window, and every replayed turn's digest, were read.
    assert (len(prompt.body["messages"]), len(prompt.body["toolDigests"])) == (20, 10)
