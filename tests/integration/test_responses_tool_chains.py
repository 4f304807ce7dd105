"""The app's tool results on the Responses door, chained as the SDKs chain them, on the
in-process stack (the embedded model's rule: it calls each offered tool whose name
occurs in the input). Vercel's AI SDK keeps one ``previousResponseId`` for every step of
a ``generateText`` tool loop: its continuation names the response before the pause and
resends the question and the call before the results. Tool results can only continue a
paused turn, so they never open a fork: one that answers nothing is refused and leaves
the end user's conversations as they were."""

from __future__ import annotations

from typing import Any

from tests.support.chat_door import WEATHER_TOOL
from tests.support.inprocess_api import InProcessApi
from tests.support.responses_door import ask, respond_http, text_of
from tests.support.tenants import Tenant, transcript

ASK = "What does get_weather say about Paris?"
TOOLS = [{"type": "function", **WEATHER_TOOL["function"]}]


def conversations_of(api: InProcessApi, tenant: Tenant, end_user: str) -> list[str]:
    query = {"externalRef": end_user}
    found = api.call("GET", "/v1/sessions", token=tenant.token, query=query).body
    return sorted(s["id"] for s in found["sessions"])


def result_for(call: dict[str, Any], output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call["call_id"], "output": output}


def test_results_chained_to_the_response_before_the_pause_continue_it(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = ask(api, tenant, "Hello", user="customer-chain")
    paused = ask(api, tenant, ASK, previous_response_id=first["id"], tools=TOOLS)
    [call] = paused["output"]
    assert call["type"] == "function_call"
    resent = [
        {"role": "user", "content": ASK},
        {key: call[key] for key in ("type", "call_id", "name", "arguments")},
        result_for(call, "sunny, 24C"),
    ]

    done = respond_http(
        api,
        tenant,
        {
            "model": "cap-generative",
            "input": resent,
            "previous_response_id": first["id"],
            "tools": TOOLS,
        },
    )

    assert done.status == 200, done.body
    assert '"sunny, 24C"' in text_of(done.body)
    session_id = first["conversation"]["id"]
    assert done.body["conversation"] == {"id": session_id}
    assert [m["content"] for m in transcript(api, tenant, session_id)][2:] == [
        ASK,
        text_of(done.body),
    ]
    assert conversations_of(api, tenant, "customer-chain") == [session_id]


def test_results_after_an_older_response_are_refused_and_open_no_fork(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = ask(api, tenant, "Hello", user="customer-stale")
    ask(api, tenant, "And again", previous_response_id=first["id"])
    before = conversations_of(api, tenant, "customer-stale")

    refused = respond_http(
        api,
        tenant,
        {
            "model": "cap-generative",
            "input": [result_for({"call_id": "call_none"}, "late")],
            "previous_response_id": first["id"],
        },
    )

    assert refused.status == 409, refused.body
    assert refused.body["error"]["code"] == "tool_calls_mismatch"
    assert conversations_of(api, tenant, "customer-stale") == before
