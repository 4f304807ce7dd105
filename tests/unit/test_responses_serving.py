"""The Responses door over fakes (v4): its requests read into turns
(``responses_door``), served by the one serving path, answered as Responses and their
events (``response_frames``); stored responses read, listed and deleted
(``ResponseService``); conversations opened, bound once and continued
(``ConversationService``); and the chat door's first keyed call that brings a history."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.domain.errors import (
    ExternalRefImmutable,
    PrincipalImmutable,
    ProviderError,
    ResponseNotFound,
    ServiceError,
    SessionCapabilityMismatch,
    ToolCallsMismatch,
    ValidationFailed,
)
from convo_memory.domain.generation import ModelStep, TokenUsage
from convo_memory.domain.imported_history import ImportedTurn
from convo_memory.domain.item_ids import app_call_id
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.responses import ResponseRef
from convo_memory.domain.turns import (
    SessionByKey,
    SessionOwner,
    TurnBegun,
    TurnCommand,
    UserText,
)
from convo_memory.doors import chat_completions, response_frames
from convo_memory.doors import responses as responses_door
from convo_memory.edge.errors import error_body, openai_param
from convo_memory.edge.turn_edge import BufferedEvents
from tests.fakes.adapters import FakeProvider, ScriptedModel
from tests.fakes.app import WS, FakeApp, fake_app

PRINCIPAL = '{"tenant": "a"}'
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def respond(
    app: FakeApp, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``POST /v1/responses`` through the door and the serving path: the Response."""
    turn = responses_door.read_response_turn({"model": "cap", **body}, headers or {})
    result = app.container.turns.serve(WS, turn.command, None)
    return response_frames.served_response(result, turn.echo)


def stream(app: FakeApp, body: dict[str, Any]) -> list[dict[str, Any]]:
    """One streamed response: its events' payloads, in order."""
    turn = responses_door.read_response_turn({"model": "cap", **body, "stream": True}, {})
    events = BufferedEvents()
    result = app.container.turns.serve(WS, turn.command, events)
    frames = response_frames.ResponseEvents(turn.echo).frames([*events, result])
    return [json.loads(frame.split("data: ", 1)[1]) for frame in frames]


def transcript(app: FakeApp, session_id: str) -> list[tuple[str, str]]:
    page, _ = app.container.sessions.messages(WS, session_id, 100)
    return [(m.role, m.content) for m in page]


def sent(prompt: Prompt) -> str:
    return json.dumps([m.content for m in prompt.messages])


def app_with(provider: FakeProvider | None = None, **capability: Any) -> FakeApp:
    app = fake_app(provider=provider or FakeProvider("Noted."))
    app.capability("cap", **capability)
    app.capability("other")
    return app


# -- which conversation ------------------------------------------------------------------


def test_a_chain_continues_its_conversation_in_place() -> None:
    app = app_with()
    first = respond(app, {"input": "My name is Ada.", "user": "u-1"})

    second = respond(app, {"input": "What is my name?", "previous_response_id": first["id"]})

    assert "My name is Ada." in sent(app.provider.prompts[-1])
    assert second["conversation"] == first["conversation"]
    assert second["previous_response_id"] == first["id"]
    assert transcript(app, first["conversation"]["id"]) == [
        ("user", "My name is Ada."),
        ("assistant", "Noted."),
        ("user", "What is my name?"),
        ("assistant", "Noted."),
    ]


def test_answering_an_older_response_forks_at_its_answer_without_mixing_branches() -> None:
    app = app_with()
    root = respond(app, {"input": "Plan Rome."})
    respond(app, {"input": "Food.", "previous_response_id": root["id"]})

    branch = respond(app, {"input": "Museums.", "previous_response_id": root["id"]})
    after = respond(app, {"input": "And churches?", "previous_response_id": branch["id"]})

    assert "Food." not in sent(app.provider.prompts[-1])
    parent, fork = root["conversation"]["id"], branch["conversation"]["id"]
    assert fork != parent and after["conversation"]["id"] == fork
    assert [text for role, text in transcript(app, fork) if role == "user"] == [
        "Plan Rome.",
        "Museums.",
        "And churches?",
    ]
    assert [text for role, text in transcript(app, parent) if role == "user"] == [
        "Plan Rome.",
        "Food.",
    ]
    session = app.container.sessions.get(WS, fork)
    assert session.fork_of is not None and session.fork_of.at_seq == 2


def test_a_new_conversation_records_the_history_it_brought_as_its_first_turns() -> None:
    app = app_with()
    response = respond(
        app,
        {
            "input": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "I live in Oslo."},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Nice."}]},
                {"role": "assistant", "content": "Anything else?"},
                {"role": "user", "content": [{"type": "input_text", "text": "Where?"}]},
            ]
        },
    )

    prompt = app.provider.prompts[-1]
    assert "I live in Oslo." in sent(prompt) and "Be brief." in prompt.system
    assert transcript(app, response["conversation"]["id"]) == [
        ("user", "I live in Oslo."),
        ("assistant", "Nice."),
        ("user", ""),  # a missing partner is an empty message
        ("assistant", "Anything else?"),
        ("user", "Where?"),
        ("assistant", "Noted."),
    ]
    # The instructions were this response's only: the next one is not sent them.
    respond(app, {"input": "More?", "previous_response_id": response["id"]})
    assert "Be brief." not in app.provider.prompts[-1].system


def test_a_conversation_is_bound_by_its_first_response_and_refuses_others() -> None:
    app = app_with()
    opened = app.container.conversations.create(WS, {"topic": "x"}, (ImportedTurn("Hi", ""),))
    assert (opened.capability_id, opened.external_ref) == (None, None)
    given = {"conversation": opened.id, "user": "u-1"}

    respond(app, {**given, "input": "Hello."}, {"X-Convo-Principal": PRINCIPAL})

    bound = app.container.sessions.get(WS, opened.id)
    assert (bound.capability_id, bound.external_ref, bound.principal) == (
        "cap",
        "u-1",
        {"tenant": "a"},
    )
    with pytest.raises(SessionCapabilityMismatch):
        respond(app, {**given, "input": "x", "model": "other"})
    with pytest.raises(ExternalRefImmutable):
        respond(app, {**given, "input": "x", "user": "u-2"})
    with pytest.raises(PrincipalImmutable):
        respond(app, {**given, "input": "x"}, {"X-Convo-Principal": '{"tenant": "b"}'})
    assert len(transcript(app, opened.id)) == 4  # the imported turn and the one response


def test_store_false_keeps_nothing_and_cannot_be_found() -> None:
    app = app_with()
    app.settle()

    response = respond(app, {"input": "Once.", "store": False})

    assert response["conversation"] is None and response["store"] is False
    assert app.db.turns == {} and app.db.heads == {}
    with pytest.raises(ResponseNotFound):
        app.container.responses.get(WS, response["id"])
    with pytest.raises(ResponseNotFound):
        respond(app, {"input": "Again.", "previous_response_id": response["id"]})


# -- stored responses ----------------------------------------------------------------------


def test_a_stored_response_is_read_listed_and_deleted_from_its_turn() -> None:
    app = app_with()
    first = respond(app, {"input": "One.", "metadata": {"k": "v"}})
    second = respond(
        app, {"input": "Two.", "previous_response_id": first["id"], "instructions": "Short."}
    )
    app.settle()

    found = app.container.responses.get(WS, second["id"])

    assert app.db.calls["find_response"] == 1  # one read finds it
    stored = response_frames.stored_response(found)
    assert (stored["id"], stored["output_text"], stored["instructions"]) == (
        second["id"],
        "Noted.",
        "Short.",
    )
    assert stored["previous_response_id"] == first["id"]
    assert response_frames.stored_response(app.container.responses.get(WS, first["id"]))[
        "metadata"
    ] == {"k": "v"}
    items = response_frames.sent_items(*app.container.responses.sent(WS, second["id"]))
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [
        ("user", "One."),
        ("assistant", "Noted."),
        ("user", "Two."),
    ]

    app.container.responses.delete(WS, first["id"])

    with pytest.raises(ResponseNotFound):
        app.container.responses.get(WS, first["id"])
    assert transcript(app, first["conversation"]["id"])[0] == ("user", "One.")
    with pytest.raises(ResponseNotFound):
        app.container.responses.get("ws_other", second["id"])


def test_a_response_id_names_its_session_position_and_turn() -> None:
    app = app_with()
    response = respond(app, {"input": "Hi."})

    ref = ResponseRef.parse(response["id"])

    assert ref is not None and ref.session_id == response["conversation"]["id"]
    assert ref.user_seq == 1 and ResponseRef.parse("resp_" + ref.reply_id) is None


# -- the Response and its stream --------------------------------------------------------------


def test_a_withheld_answer_is_incomplete_for_the_content_filter() -> None:
    app = app_with(
        FakeProvider("a forbidden answer"),
        contentFilter={"type": "embedded", "blockedTerms": ["forbidden"], "withheldMessage": "no"},
    )

    response = respond(app, {"input": "Hi."})

    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "content_filter"}
    assert response["output_text"] == "no"


class CutModel(FakeProvider):
    """Stops at its output token limit and reports tokens, some read from its cache."""

    def step(self, prompt: Prompt, *args: Any, **kwargs: Any) -> ModelStep:
        self.prompts.append(prompt)
        usage = TokenUsage(100, 5, cached_input_tokens=60)
        return ModelStep("It was a dark", usage=usage, finish="length")


def test_a_length_cut_answer_is_incomplete_and_usage_counts_cached_tokens() -> None:
    app = app_with(CutModel())

    response = respond(app, {"input": "A story.", "max_output_tokens": 5})

    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 60}
    assert response["usage"]["total_tokens"] == 105
    stored = response_frames.stored_response(app.container.responses.get(WS, response["id"]))
    assert stored["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_length_cut_answer_is_incomplete_when_the_apps_tools_were_offered_too() -> None:
    app = app_with(CutModel())

    response = respond(app, {"input": "A story.", "tools": [WEATHER], "max_output_tokens": 5})

    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_numbers_its_events_and_ends_with_the_whole_response() -> None:
    app = app_with(FakeProvider("three small words"))

    events = stream(app, {"input": "Hi."})

    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["id"] == events[-1]["response"]["id"]
    assert events[-1]["response"]["output_text"] == "three small words"


def test_a_failure_after_the_stream_began_is_response_failed() -> None:
    echo = response_frames.ResponseEvents(response_frames.ResponseEcho(model="cap"))
    frames = list(echo.frames([TurnBegun("ab12cd34ef56ab78", 1, "ses_1", 1), ProviderError("x")]))

    last = json.loads(frames[-1].split("data: ", 1)[1])
    assert last["type"] == "response.failed" and last["sequence_number"] == 2
    assert last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "provider_error"
    assert last["response"]["id"] == json.loads(frames[0].split("data: ", 1)[1])["response"]["id"]


# -- the app's own tools -----------------------------------------------------------------------


def test_a_function_tool_pauses_and_its_output_continues_the_response_in_place() -> None:
    app = app_with(ScriptedModel([("call_w", "get_weather", {"city": "Paris"})], "Sunny."))  # type: ignore[arg-type]
    paused = respond(app, {"input": "Weather?", "tools": [WEATHER], "user": "u-1"})
    [call] = paused["output"]
    sid = paused["conversation"]["id"]
    assert (call["type"], call["call_id"], call["name"]) == (
        "function_call",
        app_call_id(sid, 1, 0),
        "get_weather",
    )
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    sid = paused["conversation"]["id"]
    assert transcript(app, sid) == []

    output = {"type": "function_call_output", "call_id": "call_w", "output": "24C"}
    answer = respond(
        app, {"input": [output], "previous_response_id": paused["id"], "tools": [WEATHER]}
    )

    assert answer["output_text"] == "Sunny." and answer["conversation"]["id"] == sid
    assert transcript(app, sid) == [("user", "Weather?"), ("assistant", "Sunny.")]
    after = respond(app, {"input": "Thanks.", "previous_response_id": answer["id"]})
    assert after["conversation"]["id"] == sid  # the answer is the newest: in place


def test_a_streamed_pause_sends_the_function_call_events() -> None:
    app = app_with(ScriptedModel([("call_w", "get_weather", {})], "Sunny."))  # type: ignore[arg-type]

    events = stream(app, {"input": "Weather?", "tools": [WEATHER]})

    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[4]["name"] == "get_weather" and events[4]["arguments"] == "{}"


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.image_url",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input.0.content.0.file_id",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "input.0.content.0",
        ),
        ({"input": "x", "tools": [{"type": "file_search"}]}, "tools.0.type"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "conversation": "ses_1", "previous_response_id": "resp_1"}, None),
        ({"input": [{"role": "assistant", "content": "x"}]}, "input.0"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_what_the_door_does_not_take_is_refused_naming_the_field(
    body: dict[str, Any], param: str | None
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        responses_door.read_response_turn({"model": "cap", **body}, {})

    assert refused.value.param == (param or "previous_response_id")
    error = error_body(refused.value, openai=True)["error"]
    # OpenAI's form: input[0].content[0], tools[0].type
    assert error["type"] == "invalid_request_error"
    assert error["param"] == openai_param(refused.value.param)


def test_a_refused_response_stores_nothing() -> None:
    app = app_with()
    with pytest.raises(ServiceError):
        respond(app, {"input": "x" * 40_000})

    assert app.db.heads == {}


# -- the chat door's first keyed call ------------------------------------------------------------


def keyed(app: FakeApp, history: tuple[ImportedTurn, ...], text: str) -> str:
    owner = SessionOwner("u-1")
    command = TurnCommand("cap", SessionByKey("k-1", owner, history), UserText(text))
    result = app.container.turns.serve(WS, command, None)
    assert result.session_id is not None
    return result.session_id


def test_a_keys_first_call_records_its_history_and_later_calls_ignore_theirs() -> None:
    app = app_with()
    sid = keyed(app, (ImportedTurn("I am Ada.", "Hi Ada."),), "Who am I?")

    assert "I am Ada." in sent(app.provider.prompts[-1])
    again = keyed(app, (ImportedTurn("x" * 40_000, "ignored"),), "And now?")

    assert again == sid
    assert transcript(app, sid) == [
        ("user", "I am Ada."),
        ("assistant", "Hi Ada."),
        ("user", "Who am I?"),
        ("assistant", "Noted."),
        ("user", "And now?"),
        ("assistant", "Noted."),
    ]


# -- a paused response, its continuation, what a response keeps ----------------------------------


def paused_then_continued(app: FakeApp) -> tuple[dict[str, Any], dict[str, Any]]:
    paused = respond(app, {"input": "Weather?", "tools": [WEATHER], "user": "u-1"})
    output = {"type": "function_call_output", "call_id": "call_w", "output": "24C"}
    answer = respond(
        app, {"input": [output], "previous_response_id": paused["id"], "tools": [WEATHER]}
    )
    return paused, answer


def test_a_paused_response_is_read_while_it_waits_and_its_turn_is_once_recorded() -> None:
    app = app_with(ScriptedModel([("call_w", "get_weather", {})], "Sunny."))  # type: ignore[arg-type]
    paused = respond(app, {"input": "Weather?", "tools": [WEATHER], "user": "u-1"})

    # (v5) While it waits it is read back with its calls, and neither deleted nor listed.
    waiting = response_frames.stored_response(app.container.responses.get(WS, paused["id"]))
    assert waiting["output"] == paused["output"] and waiting["id"] == paused["id"]
    with pytest.raises(ResponseNotFound):
        app.container.responses.delete(WS, paused["id"])
    with pytest.raises(ResponseNotFound):
        app.container.responses.sent(WS, paused["id"])
    output = {"type": "function_call_output", "call_id": "call_w", "output": "24C"}
    answer = respond(app, {"input": [output], "previous_response_id": paused["id"]})
    with pytest.raises(ResponseNotFound):
        app.container.responses.get(WS, paused["id"])
    assert app.container.responses.get(WS, answer["id"]).answer.content == "Sunny."


def test_a_continuation_shows_the_pause_it_named_and_its_calls_cannot_be_answered_again() -> None:
    app = app_with(ScriptedModel([("call_w", "get_weather", {})], "Sunny."))  # type: ignore[arg-type]
    paused, answer = paused_then_continued(app)
    sid = paused["conversation"]["id"]

    stored = response_frames.stored_response(app.container.responses.get(WS, answer["id"]))

    assert answer["previous_response_id"] == stored["previous_response_id"] == paused["id"]
    output = {"type": "function_call_output", "call_id": "call_w", "output": "25C"}
    with pytest.raises(ToolCallsMismatch):
        respond(app, {"input": [output], "previous_response_id": paused["id"]})
    assert transcript(app, sid) == [("user", "Weather?"), ("assistant", "Sunny.")]
    # A message after the pause goes on after its turn, which holds its calls' answer.
    after = respond(app, {"input": "Thanks.", "previous_response_id": paused["id"]})
    assert after["conversation"]["id"] == sid
    assert transcript(app, sid)[2:] == [("user", "Thanks."), ("assistant", "Sunny.")]


def test_a_chained_response_keeps_nothing_more_and_reads_back_as_it_was_answered() -> None:
    app = app_with()
    first = respond(app, {"input": "One."})
    sid = first["conversation"]["id"]
    chained = respond(app, {"input": "Two.", "previous_response_id": first["id"]})
    named = respond(app, {"input": "Three.", "conversation": sid})

    assert [app.db.turns[sid][seq].turn.response for seq in (1, 3, 5)] == [None, None, None]
    for served in (first, chained, named):
        stored = response_frames.stored_response(app.container.responses.get(WS, served["id"]))
        assert stored["previous_response_id"] == served["previous_response_id"]
        assert (stored["instructions"], stored["metadata"]) == (None, {})
    assert chained["previous_response_id"] == first["id"] and named["previous_response_id"] is None


def function(**fields: Any) -> dict[str, Any]:
    return {"name": "get_weather", "description": "", "parameters": {"type": "object"}, **fields}


WIDE_SCHEMA = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1200)}}


@pytest.mark.parametrize(
    ("functions", "param"),
    [
        ([function(name=f"f{i}") for i in range(129)], "tools"),
        ([function(), function(name="x", description="d" * 5_000)], "tools[1].description"),
        ([function(name="1 bad name")], "tools[0].name"),
        ([function(parameters=WIDE_SCHEMA)], "tools[0].parameters"),
    ],
)
def test_function_tools_are_bounded_as_the_chat_doors_are(
    functions: list[dict[str, Any]], param: str
) -> None:
    tools = [{"type": "function", **f} for f in functions]
    chat_tools = [{"type": "function", "function": f} for f in functions]
    chat_body = {"model": "cap", "messages": [{"role": "user", "content": "x"}]}

    with pytest.raises(ValidationFailed) as refused:
        responses_door.read_response_turn({"model": "cap", "input": "x", "tools": tools}, {})
    with pytest.raises(ValidationFailed) as chat_refused:
        chat_completions.read_chat_turn({**chat_body, "tools": chat_tools}, {})

    error = error_body(refused.value, openai=True)["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert refused.value.message.split(": ", 1)[1] == chat_refused.value.message.split(": ", 1)[1]
