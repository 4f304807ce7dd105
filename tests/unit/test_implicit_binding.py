"""(v5) The Responses door as its clients use it, over fakes: the ids the service mints
(``item_ids``, ``app_call_ids``), OpenAI's form of ``param``, and a request bound to a
conversation by the items it resends: in place, at a pause, in a fork at an older
answer, a retry answered again, a new conversation where the named one cannot take it,
``item_reference`` (404 for an unknown one, its text where the model sees the history),
``store: false`` reading a chain, and the end user's order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.domain.errors import ItemNotFound, ValidationFailed
from convo_memory.domain.item_ids import (
    MAX_CALL_ID_CHARS,
    app_call_id,
    place_of_call_id,
    place_of_item_id,
)
from convo_memory.domain.responses import ResponseRef
from convo_memory.doors import response_frames
from convo_memory.doors import responses as responses_door
from convo_memory.edge.errors import openai_param
from tests.fakes.adapters import FakeProvider, ScriptedModel
from tests.fakes.app import WS, FakeApp, fake_app

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def app_with(provider: Any = None) -> FakeApp:
    app = fake_app(provider=provider or FakeProvider("Noted."))
    app.capability("cap")
    app.capability("other")
    return app


def respond(app: FakeApp, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    turn = responses_door.read_response_turn({"model": "cap", **body}, headers or {})
    result = app.container.turns.serve(WS, turn.command, None)
    return response_frames.served_response(result, turn.echo)


def transcript(app: FakeApp, session_id: str) -> list[tuple[str, str]]:
    page, _ = app.container.sessions.messages(WS, session_id, 100)
    return [(m.role, m.content) for m in page]


def resent(*responses: Any, said: tuple[str, ...] = ()) -> list[Any]:
    """An app's history: each response's output items as it got them, then ``said``."""
    items = [item for response in responses for item in response["output"]]
    return [*items, *({"role": "user", "content": text} for text in said)]


def sid(response: Any) -> str:
    return str(response["conversation"]["id"])


# -- ids ---------------------------------------------------------------------------------


def test_a_minted_call_id_fits_every_provider_and_names_its_turn() -> None:
    call_id = app_call_id("ses_0123456789abcdef0123", 999_999_999, 1234)

    assert call_id is not None and len(call_id) <= MAX_CALL_ID_CHARS
    assert all(c.isalnum() or c in "_-" for c in call_id)
    place = place_of_call_id(call_id)
    assert place is not None and (place.session_id, place.seq) == (
        "ses_0123456789abcdef0123",
        999_999_999,
    )
    assert place_of_call_id("call_abc") is None and place_of_item_id("msg_x") is None


@pytest.mark.parametrize(
    ("dotted", "bracketed"),
    [
        ("input.2.content.0.text", "input[2].content[0].text"),
        ("tools.3.name", "tools[3].name"),
        ("text.format", "text.format"),
        ("X-Convo-User", "X-Convo-User"),
    ],
)
def test_param_is_named_in_openais_form(dotted: str, bracketed: str) -> None:
    assert openai_param(dotted) == bracketed


# -- binding by the items an app resends ----------------------------------------------------


def test_resent_history_continues_in_place_and_an_older_answer_forks() -> None:
    app = app_with()
    first = respond(app, {"input": "One."})
    second = respond(app, {"input": [*resent(first, said=("Two.",))]})
    assert sid(second) == sid(first)
    assert transcript(app, sid(first)) == [
        ("user", "One."),
        ("assistant", "Noted."),
        ("user", "Two."),
        ("assistant", "Noted."),
    ]

    edited = respond(app, {"input": resent(first, said=("Deux.",))})

    assert sid(edited) != sid(first)  # a branch at the first answer, never a mixed history
    assert transcript(app, sid(edited))[-2:] == [("user", "Deux."), ("assistant", "Noted.")]
    assert len(transcript(app, sid(first))) == 4


def test_a_retry_of_the_same_input_answers_that_turn_again() -> None:
    app = app_with()
    first = respond(app, {"input": "One."})
    body = {"input": resent(first, said=("Two.",))}
    answered = respond(app, body)
    respond(app, {"input": resent(first, answered, said=("Three.",))})

    again = respond(app, body)  # after a later turn too: within the window, the same turn

    assert again["id"] == answered["id"] and again["output"] == answered["output"]
    assert [text for _, text in transcript(app, sid(first))][::2] == ["One.", "Two.", "Three."]


def test_outputs_with_minted_call_ids_continue_their_pause_wherever_they_arrive() -> None:
    model = ScriptedModel([("call_1", "get_weather", {"city": "Oslo"})], "Snowing.")
    app = app_with(model)
    paused = respond(app, {"input": "Weather?", "tools": [WEATHER]})
    [call] = paused["output"]
    assert call["call_id"] == app_call_id(sid(paused), 1, 0)
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "-3C"}

    done = respond(app, {"input": [output], "tools": [WEATHER]})  # names nothing else

    assert sid(done) == sid(paused) and done["output_text"] == "Snowing."
    assert transcript(app, sid(paused)) == [("user", "Weather?"), ("assistant", "Snowing.")]
    assert app.container.sessions.context(WS, sid(paused)).pending is None


def test_items_of_another_capability_open_a_new_conversation_never_409() -> None:
    app = app_with()
    first = respond(app, {"input": "One."})
    history = [{"role": "user", "content": "One."}, *resent(first, said=("Two.",))]
    turn = responses_door.read_response_turn({"model": "other", "input": history}, {})

    result = app.container.turns.serve(WS, turn.command, None)

    assert result.session_id not in (None, sid(first))
    assert transcript(app, str(result.session_id)) == [
        ("user", "One."),
        ("assistant", "Noted."),
        ("user", "Two."),
        ("assistant", "Noted."),
    ]


def test_an_item_reference_is_checked_and_stands_for_its_text_where_the_model_sees_it() -> None:
    model = FakeProvider("Noted.")
    app = app_with(model)
    first = respond(app, {"input": "My name is Ada."})
    reference = {"type": "item_reference", "id": first["output"][0]["id"]}
    unknown = {"type": "item_reference", "id": "msg_ses_0123456789abcdef0123_2"}

    with pytest.raises(ItemNotFound) as refused:
        respond(app, {"input": [unknown, {"role": "user", "content": "Hi."}]})
    stateless = respond(
        app,
        {
            "store": False,
            "input": [
                {"role": "user", "content": "My name is Ada."},
                reference,
                {"role": "user", "content": "Who am I?"},
            ],
        },
    )

    assert refused.value.code == "item_not_found"
    assert stateless["conversation"] is None
    assert "Noted." in json.dumps([m.content for m in model.prompts[-1].messages])


def test_store_false_reads_a_chain_and_records_nothing() -> None:
    model = FakeProvider("Noted.")
    app = app_with(model)
    first = respond(app, {"input": "My name is Ada."})

    unstored = respond(
        app, {"input": "Who am I?", "previous_response_id": first["id"], "store": False}
    )

    assert ResponseRef.parse(unstored["id"]) is None and unstored["store"] is False
    assert "My name is Ada." in json.dumps([m.content for m in model.prompts[-1].messages])
    assert len(transcript(app, sid(first))) == 2


def test_the_end_user_is_the_header_else_user_else_safety_identifier() -> None:
    app = app_with()
    headers = {"X-Convo-User": "from-header"}

    answer = respond(app, {"input": "Hi.", "user": "u", "safety_identifier": "hash"}, headers)

    assert app.container.sessions.get(WS, sid(answer)).external_ref == "from-header"
    assert answer["user"] == "u" and answer["safety_identifier"] == "hash"


def test_a_removed_answer_is_left_out_and_the_replay_keeps_roles_alternating() -> None:
    model = FakeProvider("Noted.")
    app = app_with(model)
    first = respond(app, {"input": "My name is Ada."})
    respond(app, {"input": "I live in Oslo.", "conversation": sid(first)})

    app.container.conversations.remove_item(WS, sid(first), first["output"][0]["id"])
    respond(app, {"input": "Who am I?", "conversation": sid(first)})

    sent = [(m.role, m.content) for m in model.prompts[-1].messages]
    assert [role for role, _ in sent] == ["user", "assistant", "user"]
    assert sent[0] == ("user", "My name is Ada.\n\nI live in Oslo.")
    assert [text for _, text in transcript(app, sid(first))][:2] == [
        "My name is Ada.",
        "I live in Oslo.",
    ]
    with pytest.raises(ItemNotFound):
        app.container.conversations.item(WS, sid(first), first["output"][0]["id"])


def test_a_retry_that_races_the_request_it_repeats_is_answered_as_its_twin() -> None:
    app = app_with()
    first = respond(app, {"input": "One."})
    body = {"input": resent(first, said=("Two.",))}
    turn = responses_door.read_response_turn({"model": "cap", **body}, {})
    originals: list[Any] = []

    def original_lands_first(db: Any) -> None:  # while the retry asked the model
        originals.append(respond(app, body))

    app.db.before_append = original_lands_first
    retried = response_frames.served_response(
        app.container.turns.serve(WS, turn.command, None), turn.echo
    )

    [original] = originals
    assert retried["id"] == original["id"] and retried["output"] == original["output"]
    assert [text for _, text in transcript(app, sid(first))][::2] == ["One.", "Two."]


def test_another_workspaces_items_bind_nothing_of_it() -> None:
    app = app_with()
    app.capability("cap", ws="ws_beta")
    theirs = respond(app, {"input": "A secret."})
    history = [{"role": "user", "content": "A secret."}, *resent(theirs, said=("And?",))]
    turn = responses_door.read_response_turn({"model": "cap", "input": history}, {})

    mine = app.container.turns.serve("ws_beta", turn.command, None)

    assert mine.session_id != sid(theirs)  # a conversation of its own workspace
    assert len(transcript(app, sid(theirs))) == 2
    reference = {"type": "item_reference", "id": theirs["output"][0]["id"]}
    referring = responses_door.read_response_turn(
        {"model": "cap", "store": False, "input": [reference, {"role": "user", "content": "?"}]},
        {},
    )
    with pytest.raises(ItemNotFound):
        app.container.turns.serve("ws_beta", referring.command, None)


def test_structured_output_is_refused_naming_text_format_where_the_model_cannot_take_it() -> None:
    app = app_with()
    schema = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}

    with pytest.raises(ValidationFailed) as refused:
        respond(app, {"input": "Hi.", "text": {"format": schema}})

    assert refused.value.param == "text.format"


def test_a_streamed_chat_pause_shows_the_minted_call_ids_not_the_models() -> None:
    from convo_memory.domain.tools import AppToolCall
    from convo_memory.domain.turns import AnswerDelta, AppToolCalls, TurnBegun, TurnResult
    from convo_memory.doors.chat_frames import chunk_frames

    minted = str(app_call_id("ses_0123456789abcdef0123", 1, 0))
    result = TurnResult(
        "ab12",
        1,
        "Let me see.",
        False,
        "ses_0123456789abcdef0123",
        None,
        False,
        None,
        None,
        finish="tool_calls",
        tool_calls=(AppToolCall(minted, "get_weather", "{}"),),
    )
    events: list[Any] = [
        TurnBegun("ab12", 1, "ses_0123456789abcdef0123", 1),
        AnswerDelta("Let me see."),
        AppToolCalls((AppToolCall("call_model_own", "get_weather", "{}"),)),
        result,
    ]

    text = "".join(chunk_frames(events, "cap", False))

    assert minted in text and "call_model_own" not in text


def test_a_retried_continuation_is_answered_with_the_turn_it_ended() -> None:
    model = ScriptedModel([("call_1", "get_weather", {"city": "Oslo"})], "Snowing.")
    app = app_with(model)
    paused = respond(app, {"input": "Weather?", "tools": [WEATHER]})
    [call] = paused["output"]
    body = {
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "-3C"}],
        "tools": [WEATHER],
    }
    done = respond(app, body)

    again = respond(app, body)  # the SDK timed out and sent the outputs again

    assert again["id"] == done["id"] and again["output_text"] == "Snowing."
    assert transcript(app, sid(paused)) == [("user", "Weather?"), ("assistant", "Snowing.")]
