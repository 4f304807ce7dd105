"""The OpenAI-compatible door on the in-process stack: through API Gateway (all at once)
and through the streaming Function URL's door (as made), over moto."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support import fake_aws
from tests.support.chat_door import (
    chat_body,
    chat_http,
    chat_stream_door,
    keyed,
    streamed_text,
    user,
)
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, transcript

DOORS = [pytest.param(chat_http, id="HttpApi"), pytest.param(chat_stream_door, id="Function URL")]
GENERATIVE = "cap-generative"


def items(api: InProcessApi) -> int:
    return fake_aws.item_count(
        api.container.infrastructure.clients["dynamodb"], api.container.settings.table_name
    )


@pytest.mark.parametrize("door", DOORS)
def test_three_turns_by_session_key_hold_one_conversation(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    history: list[dict[str, str]] = []
    answers = []
    for text in ("My name is Ada.", "I live in Lyon.", "What is my name?"):
        history.append(user(text))
        body = chat_body(GENERATIVE, *history, user="customer-7")
        answer = door(api, tenant, body, keyed("conv-1"))
        assert answer.status == 200, answer.body
        answers.append(answer)
        history.append(
            {"role": "assistant", "content": answer.body["choices"][0]["message"]["content"]}
        )

    session_ids = {a.body["convo"]["sessionId"] for a in answers}
    assert len(session_ids) == 1 and {a.session_id for a in answers} == session_ids
    (session_id,) = session_ids
    # The whole history was resent every time; each message is recorded once.
    assert [m["content"] for m in transcript(api, tenant, session_id)] == [
        m["content"] for m in history
    ]
    third = answers[2].body
    assert third["object"] == "chat.completion" and third["id"].startswith("chatcmpl-")
    assert third["choices"][0]["finish_reason"] == "stop"
    assert third["convo"]["turn"] == {"userSeq": 5, "assistantSeq": 6}
    assert third["convo"]["recorded"] is True
    # The embedded model says what it was shown: the four earlier messages, replayed.
    assert "I remember 4 earlier messages" in third["choices"][0]["message"]["content"]
    session = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert session["sessionKey"] == "conv-1" and session["externalRef"] == "customer-7"
    assert session["principal"] is None


def test_the_streamed_answer_is_chunks_that_concatenate_to_the_recorded_answer(
    api: InProcessApi, tenant: Tenant
) -> None:
    body = chat_body(
        GENERATIVE,
        user("Stream this, please."),
        user="customer-8",
        stream=True,
        stream_options={"include_usage": True},
    )
    for door, key in ((chat_http, "s-http"), (chat_stream_door, "s-url")):
        answer = door(api, tenant, body, keyed(key))
        assert answer.status == 200, answer.body
        lines = answer.body
        assert lines[-1] == "[DONE]"
        first, last = lines[0], lines[-2]
        assert first["object"] == "chat.completion.chunk"
        assert first["choices"][0]["delta"]["role"] == "assistant"
        assert last["choices"][0]["finish_reason"] == "stop"
        assert {line["id"] for line in lines[:-1]} == {first["id"]}
        session_id = last["convo"]["sessionId"]
        assert answer.session_id == session_id
        recorded = transcript(api, tenant, session_id)[-1]["content"]
        assert streamed_text(lines) == recorded and "Stream this, please." in recorded
        # The Function URL's answer arrives as it is made: more than one piece of text.
        if door is chat_stream_door:
            assert sum(1 for line in lines[1:-2] if line["choices"][0]["delta"]) > 1


@pytest.mark.parametrize("door", DOORS)
def test_a_stateless_call_records_nothing(api: InProcessApi, tenant: Tenant, door: Any) -> None:
    before = items(api)
    body = chat_body(
        GENERATIVE,
        {"role": "system", "content": "Be brief."},
        user("Hi"),
        {"role": "assistant", "content": "Hello."},
        user([{"type": "text", "text": "Who"}, {"type": "text", "text": "are you?"}]),  # type: ignore[arg-type]
    )
    answer = door(api, tenant, body)

    assert answer.status == 200, answer.body
    assert answer.session_id is None
    assert answer.body["convo"] == {
        "sessionId": None,
        "turn": None,
        "recorded": False,
        "withheld": False,
        "runId": None,
    }
    # The model saw the request's messages as given: two before the input.
    content = answer.body["choices"][0]["message"]["content"]
    assert 'You said: "Who\nare you?"' in content and "I remember 2 earlier messages" in content
    assert items(api) == before


@pytest.mark.parametrize("door", DOORS)
def test_a_session_by_id_and_its_refusals(api: InProcessApi, tenant: Tenant, door: Any) -> None:
    session_id = open_session(api, tenant)
    body = chat_body(GENERATIVE, user("Hello by id"))
    answer = door(api, tenant, body, {"X-Convo-Session-Id": session_id})
    assert answer.status == 200 and answer.body["convo"]["sessionId"] == session_id

    unknown = door(api, tenant, body, {"X-Convo-Session-Id": "ses_missing"})
    mismatch = door(
        api, tenant, chat_body("cap-agent", user("x")), {"X-Convo-Session-Id": session_id}
    )
    classic = door(
        api, tenant, chat_body("cap-classic", user("x")), {"X-Convo-Session-Id": session_id}
    )
    no_model = door(api, tenant, chat_body("cap-nothing", user("x")))

    assert (unknown.status, unknown.body["error"]["code"]) == (404, "session_not_found")
    assert unknown.body["error"]["type"] == "not_found_error"
    assert mismatch.body["error"]["code"] == "session_capability_mismatch"
    assert mismatch.body["error"]["type"] == "conflict_error"
    assert {k.lower(): v for k, v in mismatch.headers.items()}["x-should-retry"] == "false"
    assert classic.body["error"]["code"] == "capability_not_conversational"
    assert (no_model.status, no_model.body["error"]["code"]) == (404, "capability_not_found")


@pytest.mark.parametrize("door", DOORS)
def test_a_keys_user_and_principal_never_change(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    principal = {"tenant_id": "store-a", "user_id": "u_1"}
    body = chat_body(GENERATIVE, user("hi"), user="customer-9")
    first = door(api, tenant, body, keyed("k-owner", principal))
    assert first.status == 200, first.body

    other_user = door(api, tenant, {**body, "user": "customer-10"}, keyed("k-owner", principal))
    other_principal = door(api, tenant, body, keyed("k-owner", {"tenant_id": "store-b"}))
    no_principal = door(api, tenant, body, keyed("k-owner"))
    no_user = door(api, tenant, chat_body(GENERATIVE, user("hi")), keyed("k-owner"))

    assert (other_user.status, other_user.body["error"]["code"]) == (409, "external_ref_immutable")
    assert (other_principal.status, other_principal.body["error"]["code"]) == (
        409,
        "principal_immutable",
    )
    assert no_principal.status == 200  # absent: the stored principal applies
    assert (no_user.status, no_user.body["error"]["code"]) == (422, "validation_error")
    session = api.call(
        "GET", f"/v1/sessions/{first.body['convo']['sessionId']}", token=tenant.token
    ).body
    assert session["principal"] == principal and session["messageCount"] == 4


def test_a_key_belongs_to_its_workspace_and_capability(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    body = chat_body(GENERATIVE, user("hi"), user="customer-11")
    mine = chat_http(api, tenant, body, keyed("shared-key"))
    theirs = chat_http(api, other_tenant, body, keyed("shared-key"))
    agent = chat_http(api, tenant, {**body, "model": "cap-agent"}, keyed("shared-key"))

    ids = {a.body["convo"]["sessionId"] for a in (mine, theirs, agent)}
    assert len(ids) == 3


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"n": 2}, "n"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_unsupported_fields_are_422_naming_the_field(
    api: InProcessApi, tenant: Tenant, extra: dict[str, Any], field: str
) -> None:
    before = items(api)
    for door in (chat_http, chat_stream_door):
        answer = door(api, tenant, chat_body(GENERATIVE, user("hi"), **extra))
        assert answer.status == 422, answer.body
        assert answer.body["error"]["message"].startswith(f"{field} is not supported")
        assert answer.body["error"]["type"] == "invalid_request_error"
    assert items(api) == before


def test_what_asks_for_nothing_unsupported_is_served(api: InProcessApi, tenant: Tenant) -> None:
    body = chat_body(
        GENERATIVE,
        user("hi"),
        tools=[],
        tool_choice="none",
        n=1,
        response_format={"type": "text"},
        logprobs=False,
        modalities=["text"],
        frequency_penalty=0.5,  # an unknown field: ignored
    )
    assert chat_http(api, tenant, body).status == 200


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "assistant", "content": "last is not the user's"}],
        [user([{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])],  # type: ignore[arg-type]
        [{"role": "user", "content": None}],
        [{"role": "tool", "content": "r", "tool_call_id": "c"}, user("hi")],
    ],
)
def test_messages_the_door_cannot_take_are_422(
    api: InProcessApi, tenant: Tenant, messages: list[dict[str, Any]]
) -> None:
    answer = chat_http(api, tenant, {"model": GENERATIVE, "messages": messages})
    assert (answer.status, answer.body["error"]["code"]) == (422, "validation_error")


def test_in_a_session_earlier_messages_are_never_read(api: InProcessApi, tenant: Tenant) -> None:
    # A tool message stateless would refuse: in a session it is history the app resent.
    messages = [{"role": "tool", "content": "r", "tool_call_id": "c"}, user("hi")]
    answer = chat_http(
        api, tenant, {"model": GENERATIVE, "messages": messages, "user": "u"}, keyed("k-tool")
    )
    assert answer.status == 200, answer.body
    assert answer.body["convo"]["turn"] == {"userSeq": 1, "assistantSeq": 2}


def test_a_withheld_answer_finishes_with_content_filter_and_streams_no_flagged_text(
    api: InProcessApi, tenant: Tenant
) -> None:
    created = api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={
            "name": "filtered",
            "kind": "generative",
            "contentFilter": {"type": "embedded", "blockedTerms": ["forbidden"]},
        },
    )
    cap = created.body["id"]
    body = chat_body(cap, user("say forbidden things"), user="u", stream=True)
    for door, key in ((chat_http, "w-1"), (chat_stream_door, "w-2")):
        answer = door(api, tenant, body, keyed(key))
        lines = answer.body
        text = streamed_text(lines)
        assert "forbidden" not in text and text == "This answer was withheld by the content filter."
        assert lines[-2]["choices"][0]["finish_reason"] == "content_filter"
        assert lines[-2]["convo"]["withheld"] is True
        recorded = transcript(api, tenant, lines[-2]["convo"]["sessionId"])[-1]
        assert recorded["withheld"] is True and recorded["content"] == text
    plain = chat_http(api, tenant, {**body, "stream": False}, keyed("w-1"))
    assert plain.body["choices"][0]["finish_reason"] == "content_filter"


def test_an_idempotent_retry_returns_the_first_completion(
    api: InProcessApi, tenant: Tenant
) -> None:
    body = chat_body(GENERATIVE, user("once"), user="u")
    headers = {**keyed("k-idem"), "Idempotency-Key": "idem-1"}
    first = chat_http(api, tenant, body, headers)
    again = chat_http(api, tenant, body, headers)
    streamed = chat_stream_door(
        api, tenant, {**body, "stream": True}, {**headers, "Idempotency-Key": "idem-2"}
    )
    replayed = chat_stream_door(
        api, tenant, {**body, "stream": True}, {**headers, "Idempotency-Key": "idem-2"}
    )

    assert first.body == again.body
    assert streamed_text(streamed.body) == streamed_text(replayed.body)
    assert streamed.body[-2] == replayed.body[-2]
    assert len(transcript(api, tenant, first.body["convo"]["sessionId"])) == 4


def test_eight_concurrent_first_calls_on_one_key_open_one_session(
    api: InProcessApi, tenant: Tenant
) -> None:
    body = chat_body(GENERATIVE, user("race"), user="racer")
    answers: list[Any] = []
    start = threading.Barrier(8)

    def call(index: int) -> None:
        start.wait()
        door = chat_http if index % 2 else chat_stream_door
        answers.append(door(api, tenant, body, keyed("racing-key")))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert [a.status for a in answers] == [200] * 8, [a.body for a in answers]
    (session_id,) = {a.body["convo"]["sessionId"] for a in answers}
    listed = api.call("GET", "/v1/sessions", token=tenant.token, query={"externalRef": "racer"})
    assert [s["id"] for s in listed.body["sessions"]] == [session_id]
    assert len(transcript(api, tenant, session_id)) == 16


def test_deleting_a_keyed_session_releases_its_key(api: InProcessApi, tenant: Tenant) -> None:
    body = chat_body(GENERATIVE, user("remember me"), user="u-del")
    first = chat_http(api, tenant, body, keyed("k-del")).body["convo"]["sessionId"]
    dynamodb = api.container.infrastructure.clients["dynamodb"]
    table = api.container.settings.table_name

    assert api.call("DELETE", f"/v1/sessions/{first}", token=tenant.token).status == 204

    scanned = dynamodb.scan(TableName=table)["Items"]
    assert not [i for i in scanned if "#KEY#k-del" in i["pk"]["S"]]
    head = [i for i in scanned if i["pk"]["S"] == f"SESSION#{first}"]
    assert head and all("sessionKey" not in i for i in head)
    second = chat_http(api, tenant, body, keyed("k-del")).body
    assert second["convo"]["sessionId"] != first and second["convo"]["turn"]["userSeq"] == 1


def test_models_lists_conversational_capabilities_only(api: InProcessApi, tenant: Tenant) -> None:
    http = api.call("GET", "/v1/models", token=tenant.token)
    url = chat_stream_door(api, tenant, None, method="GET", path="/v1/models")
    unauthorized = api.call("GET", "/v1/models", token="not-a-token")

    assert http.status == url.status == 200
    assert http.body["object"] == "list"
    ids = {m["id"] for m in http.body["data"]}
    assert {"cap-generative", "cap-agent"} <= ids and "cap-classic" not in ids
    assert {m["owned_by"] for m in http.body["data"]} == {tenant.workspace_id}
    assert url.body == http.body
    assert unauthorized.status == 401
    assert unauthorized.body["error"]["type"] == "authentication_error"


def test_generation_options_are_validated(api: InProcessApi, tenant: Tenant) -> None:
    for extra in ({"temperature": 3}, {"top_p": -1}, {"max_tokens": 0}, {"stop": ["a"] * 5}):
        answer = chat_http(api, tenant, chat_body(GENERATIVE, user("hi"), **extra))
        assert answer.status == 422, extra
    ok = chat_http(
        api,
        tenant,
        chat_body(GENERATIVE, user("hi"), temperature=0.2, top_p=0.9, max_tokens=5, stop="x"),
    )
    assert ok.status == 200
