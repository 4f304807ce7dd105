"""The OpenAI-compatible door's reading and writing (``chat_completions``), the turn
edge's one error mapping, and sessions by an app's key (``SessionKeys``), over fakes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from convo_memory.adapters.providers.bedrock import BedrockConverseProvider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.domain.errors import (
    CapabilityNotFound,
    ExternalRefImmutable,
    IdempotencyInProgress,
    InternalError,
    PrincipalImmutable,
    RateLimited,
    SessionArchived,
    SessionKeyTaken,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.generation import GenerationOptions, TokenUsage
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.turns import (
    AnswerDelta,
    ImportedTurn,
    SessionById,
    SessionByKey,
    SessionOwner,
    TurnBegun,
    TurnEvent,
    TurnPosition,
    TurnResult,
    UserText,
)
from convo_memory.doors import chat_completions as chat
from convo_memory.doors import chat_frames
from convo_memory.edge import errors
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import served


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def read(body: dict[str, Any], headers: dict[str, str] | None = None) -> chat.ChatTurn:
    return chat.read_chat_turn({"model": "cap-1", **body}, headers or {})


# -- reading a request ---------------------------------------------------------------------


def test_in_a_session_only_the_last_user_message_is_the_input() -> None:
    history = [{"role": "system", "content": "Be brief."}, user("one"), {"role": "tool"}]
    turn = read(
        {"messages": [*history, user("two")], "user": "u-1"},
        {"X-Convo-Session-Key": "k-1", "X-Convo-Principal": '{"tenant": "a"}'},
    )

    assert turn.command.input == UserText("two")
    assert turn.command.history == ()
    # The earlier user and assistant messages go with the key: its first turns, if this
    # call opens its session (a system message and a tool message are not among them).
    assert turn.command.conversation == SessionByKey(
        "k-1",
        SessionOwner("u-1", {"tenant": "a"}, principal_given=True),
        (ImportedTurn("one", ""),),
    )


def test_stateless_history_keeps_the_messages_as_given() -> None:
    turn = read(
        {
            "messages": [
                {"role": "developer", "content": "Be brief."},
                user("hi"),
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
                user([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            ],
            "max_completion_tokens": 7,
            "max_tokens": 99,
            "stop": "END",
        }
    )

    assert turn.command.conversation is None
    assert turn.command.input == UserText("a\nb")
    assert turn.command.history == (
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "hello"),
    )
    assert turn.command.options == GenerationOptions(max_tokens=7, stop=("END",))


def test_the_session_id_header_wins_over_a_key() -> None:
    turn = read(
        {"messages": [user("hi")]},
        {"x-convo-session-id": "ses_1", "x-convo-session-key": "k"},
    )
    assert turn.command.conversation == SessionById("ses_1", SessionOwner(None))


@pytest.mark.parametrize(
    ("body", "headers", "field"),
    [
        ({"messages": [user("hi")]}, {"X-Convo-Session-Key": "k"}, "user"),
        (
            {"messages": [user("hi")], "user": "u"},
            {"X-Convo-Session-Key": ""},
            "X-Convo-Session-Key",
        ),
        (
            {"messages": [user("hi")], "user": "u"},
            {"X-Convo-Session-Key": "é"},
            "X-Convo-Session-Key",
        ),
        (
            {"messages": [user("hi")], "user": "u"},
            {"X-Convo-Session-Key": "k", "X-Convo-Principal": "[1]"},
            "X-Convo-Principal",
        ),
        (
            {"messages": [user("hi")], "user": "u"},
            {"X-Convo-Session-Key": "k", "X-Convo-Principal": "{not json"},
            "X-Convo-Principal",
        ),
        ({"messages": [{"role": "assistant", "content": "x"}]}, {}, "messages.0.role"),
        ({"messages": [user([])]}, {}, "messages.0.content"),
        ({"messages": [user([{"type": "image_url"}])]}, {}, "messages.0.content.0.image_url.url"),
        ({"messages": [user([{"type": "input_audio"}])]}, {}, "messages.0.content.0"),
        ({"messages": [{"role": "function", "content": "x"}, user("hi")]}, {}, "messages.0.role"),
        ({"messages": [user("hi")], "tool_choice": "required"}, {}, "tool_choice"),
        ({"messages": [user("hi")], "n": True}, {}, "n"),
        ({"messages": [user("hi")], "logprobs": "yes"}, {}, "logprobs"),
        ({"messages": [user("hi")], "modalities": ["image"]}, {}, "modalities"),
    ],
)
def test_what_the_door_cannot_take_is_422_naming_it(
    body: dict[str, Any], headers: dict[str, str], field: str
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        read(body, headers)
    assert refused.value.message.startswith(field)
    assert refused.value.param == field


@pytest.mark.parametrize(
    ("named", "headers"),
    [
        ({"user": "u-1"}, {}),
        ({"safety_identifier": "u-1"}, {}),
        ({}, {"X-Convo-User": "u-1"}),
        ({"user": "u-1", "safety_identifier": "u-1"}, {"x-convo-user": "u-1"}),
    ],
)
def test_the_end_user_is_user_safety_identifier_or_x_convo_user(
    named: dict[str, str], headers: dict[str, str]
) -> None:
    messages = {"messages": [user("hi")], **named}
    by_key = read(messages, {"X-Convo-Session-Key": "k", **headers}).command.conversation
    by_id = read(messages, {"X-Convo-Session-Id": "ses_1", **headers}).command.conversation

    assert by_key == SessionByKey("k", SessionOwner("u-1"))
    assert by_id == SessionById("ses_1", SessionOwner("u-1"))


def test_stateless_the_end_user_is_not_read() -> None:
    # Not a session's: two that differ name nobody the service keeps anything for.
    turn = read({"messages": [user("hi")], "user": "a", "safety_identifier": "b"})
    assert turn.command.conversation is None
    assert turn.command.conversational_only


def test_a_key_needs_an_end_user() -> None:
    with pytest.raises(ValueError, match="end user"):
        SessionByKey("k", SessionOwner(None))


def test_a_principal_breaking_the_session_rules_is_422() -> None:
    claims = json.dumps({f"c{n}": "v" for n in range(33)})
    with pytest.raises(ValidationFailed, match="principal"):
        read(
            {"messages": [user("hi")], "user": "u"},
            {"X-Convo-Session-Key": "k", "X-Convo-Principal": claims},
        )


def test_an_id_none_of_ours_could_be_is_a_404_of_its_kind() -> None:
    with pytest.raises(CapabilityNotFound):
        chat.read_chat_turn({"model": "x" * 200, "messages": [user("hi")]}, {})
    with pytest.raises(SessionNotFound):
        read({"messages": [user("hi")]}, {"X-Convo-Session-Id": "not/an/id"})


# -- writing the answer ----------------------------------------------------------------------


def result(withheld: bool = False, usage: TokenUsage | None = None) -> TurnResult:
    return served(
        reply_id="1",
        created=7,
        output="Hello there",
        withheld=withheld,
        turn=TurnPosition(1, 2),
        usage=usage,
    )


# Of the prompt's 3 tokens, the provider read 1 from its prompt cache.
USAGE = TokenUsage(input_tokens=3, output_tokens=2, cached_input_tokens=1)
EXPECTED_USAGE = {
    "prompt_tokens": 3,
    "completion_tokens": 2,
    "total_tokens": 5,
    "prompt_tokens_details": {"cached_tokens": 1},
}


def test_a_completion_carries_the_convo_extension_and_usage_when_known() -> None:
    body = chat_frames.chat_completion(result(usage=USAGE), "cap-1")

    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert body["usage"] == EXPECTED_USAGE
    assert (body["id"], body["created"], body["model"]) == ("chatcmpl-1", 7, "cap-1")
    assert body["convo"]["turn"] == {"userSeq": 1, "assistantSeq": 2}
    assert "usage" not in chat_frames.chat_completion(result(), "cap-1")
    withheld = chat_frames.chat_completion(result(withheld=True), "cap-1")
    assert withheld["choices"][0]["finish_reason"] == "content_filter"


def test_a_buffered_stream_is_role_deltas_last_chunk_and_done() -> None:
    events: list[TurnEvent] = [
        TurnBegun("1", 7, "ses_1"),
        AnswerDelta("Hello"),
        AnswerDelta(" there"),
    ]
    text = "".join(
        chat_frames.chunk_frames([*events, result(usage=USAGE)], "cap-1", include_usage=True)
    )
    lines = [block.removeprefix("data: ") for block in text.strip().split("\n\n")]

    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]] == ["Hello", " there"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == EXPECTED_USAGE and chunks[-1]["convo"]["sessionId"] == "ses_1"
    assert {chunk["id"] for chunk in chunks} == {"chatcmpl-1"}
    replayed = "".join(chat_frames.chunk_frames([result(usage=USAGE)], "cap-1", False))
    assert "usage" not in json.loads(replayed.split("\n\n")[-3][6:])
    assert json.loads(replayed.split("\n\n")[1][6:])["choices"][0]["delta"] == {
        "content": "Hello there"
    }


def test_an_error_after_the_stream_started_is_one_line_then_done() -> None:
    text = chat_frames.error_lines(InternalError("req-1"))
    error, done = text.strip().split("\n\n")

    assert json.loads(error.removeprefix("data: ")) == {
        "error": {
            "code": "internal",
            "message": "an unexpected error occurred",
            "requestId": "req-1",
            "type": "api_error",
        }
    }
    assert done == "data: [DONE]"


# -- the turn edge's one error mapping -------------------------------------------------------


def test_the_openai_body_only_adds_type_and_says_when_not_to_retry() -> None:
    conflict = errors.error_reply(SessionArchived("archived"), openai=True)
    native = errors.error_reply(SessionArchived("archived"))
    limited = errors.error_reply(RateLimited(retry_after=3), openai=True)
    busy = errors.error_reply(IdempotencyInProgress("busy"), openai=True)

    body = json.loads(conflict.body)
    assert body["error"].pop("type") == "conflict_error"
    assert body == json.loads(native.body) and native.headers == {}
    assert conflict.headers == {"x-should-retry": "false"}
    assert limited.headers == {"Retry-After": "3"}
    assert json.loads(limited.body)["error"]["type"] == "rate_limit_error"
    assert "x-should-retry" not in busy.headers


def test_every_failure_maps_to_one_contract_error() -> None:
    assert isinstance(errors.error_for(ZeroDivisionError(), "r"), InternalError)
    unavailable = errors.error_for(StoreUnavailable("throttled"), "r")
    assert (unavailable.status, unavailable.to_body()["error"]["requestId"]) == (503, "r")
    assert errors.error_for(SessionArchived("x"), "r").status == 409


# -- sessions by key --------------------------------------------------------------------------


@pytest.fixture
def app() -> FakeApp:
    app = fake_app(provider=FakeProvider(lambda prompt: f"echo {prompt.user_input}"))
    app.capability("cap-1")
    return app


def serve(app: FakeApp, text: str, conversation: SessionByKey) -> TurnResult:
    command = read({"messages": [user(text)], "user": "u"}).command
    return app.container.turns.serve(WS, replace(command, conversation=conversation))


def test_a_key_opens_its_session_once_and_is_remembered(app: FakeApp) -> None:
    owner = SessionOwner("end-user", {"t": "a"}, principal_given=True)
    choice = SessionByKey("k", owner)
    first = serve(app, "one", choice)
    app.settle()
    second = serve(app, "two", choice)

    assert first.session_id == second.session_id
    session = app.db.session(str(first.session_id))
    assert session is not None and session.session_key == "k" and session.principal == {"t": "a"}
    # Warm: no key read, no creation; the turn's own read and write only.
    assert "session_for_key" not in app.db.calls and "create_session" not in app.db.calls


def test_a_lost_race_takes_the_winners_session(app: FakeApp) -> None:
    winner = app.session("cap-1", external_ref="end-user")
    app.db.session_keys[(WS, "cap-1", "k")] = winner
    original = app.db.stores.sessions.session_for_key
    app.db.stores.sessions.session_for_key = lambda *claim: None  # type: ignore[method-assign]
    try:
        owner = SessionOwner("end-user")
        found = app.container.session_keys.resolve(WS, "cap-1", "k", owner)
    finally:
        app.db.stores.sessions.session_for_key = original  # type: ignore[method-assign]

    assert found == winner


def test_a_deleted_sessions_key_opens_a_new_session(app: FakeApp) -> None:
    choice = SessionByKey("k", SessionOwner("end-user"))
    first = serve(app, "one", choice).session_id
    # Deleted elsewhere, its key item not yet released (a deletion in flight).
    app.db.stores.sessions.begin_deletion(str(first), WS, "now")

    second = serve(app, "two", choice)

    assert second.session_id != first and second.turn is not None
    assert second.turn.user_seq == 1
    assert app.db.session_keys[(WS, "cap-1", "k")] == second.session_id


def test_a_keys_owner_never_changes(app: FakeApp) -> None:
    owner = SessionOwner("end-user", {"t": "a"}, principal_given=True)
    serve(app, "one", SessionByKey("k", owner))

    with pytest.raises(ExternalRefImmutable):
        serve(app, "x", SessionByKey("k", SessionOwner("someone-else")))
    with pytest.raises(PrincipalImmutable):
        other = SessionOwner("end-user", {"t": "b"}, principal_given=True)
        serve(app, "x", SessionByKey("k", other))
    # Without a principal header the stored principal applies.
    assert serve(app, "two", SessionByKey("k", SessionOwner("end-user")))


def test_a_key_taken_by_a_claim_not_landed_yet_is_read_again(app: FakeApp) -> None:
    sessions = app.db.stores.sessions
    winner = app.session("cap-1", external_ref="end-user")
    create = sessions.create_session
    attempts: list[int] = []

    def racing(session: Any, history: Any = ()) -> None:
        attempts.append(1)
        app.db.session_keys[(WS, "cap-1", "k")] = winner  # the other claim lands now
        raise SessionKeyTaken(None)

    sessions.create_session = racing  # type: ignore[method-assign]
    try:
        found = app.container.session_keys.resolve(WS, "cap-1", "k", SessionOwner("end-user"))
    finally:
        sessions.create_session = create  # type: ignore[method-assign]

    assert found == winner and attempts == [1]


# -- generation options at the providers ------------------------------------------------------


def test_generation_options_reach_the_providers_within_the_connections_settings() -> None:
    options = GenerationOptions(max_tokens=500, temperature=0.1, top_p=0.9, stop=("END",))
    prompt = Prompt(system="s", messages=(ChatMessage("user", "hi"),), options=options)
    openai = OpenAICompatibleProvider("http://127.0.0.1:1/v1", "m", max_tokens=100)
    bedrock = BedrockConverseProvider(client=object(), model_id="m", temperature=0.7)

    body = openai.payload(prompt, stream=False)
    inference = bedrock.request(prompt)["inferenceConfig"]
    plain = openai.payload(Prompt(system="s", messages=()), stream=False)

    assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop"]) == (
        100,
        0.1,
        0.9,
        ["END"],
    )
    assert inference == {
        "maxTokens": 500,
        "temperature": 0.1,
        "topP": 0.9,
        "stopSequences": ["END"],
    }
    assert plain["max_tokens"] == 100 and "top_p" not in plain and "stop" not in plain


def test_a_model_stopped_at_its_token_limit_finishes_with_length() -> None:
    from convo_memory.adapters.providers import bedrock, openai_compat

    assert openai_compat.finish_of({"finish_reason": "length"}) == "length"
    assert openai_compat.finish_of({"finish_reason": "stop"}) == "stop"
    assert bedrock.finish_of("max_tokens") == "length"
    assert bedrock.finish_of("end_turn") == "stop"
