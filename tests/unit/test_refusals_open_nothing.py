"""A refused request opens nothing, on any door (v5): no session, no key binding, no
message, no fork. Over fakes: the chat door's first call on a new key that continues no
pause (409), or asks what the capability's model cannot take (422); the Responses
door's new conversation and its turn after an older response, refused the same way."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.domain.errors import SessionNotFound, ToolCallsMismatch, ValidationFailed
from convo_memory.domain.turn_abandonment import Abandonment, TurnAbandoned, run_abandonable
from convo_memory.doors import chat_completions, response_frames
from convo_memory.doors import responses as responses_door
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app

# An app tool named like the agent capability's own: refused (422) by the request alone.
CLASHING = [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}]
CONTINUATION = [
    {"role": "user", "content": "weather?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
KEYED = {"x-convo-session-key": "conversation-1"}


@pytest.fixture
def app() -> FakeApp:
    app = fake_app(provider=FakeProvider(lambda prompt: f"echo {prompt.user_input}"))
    app.capability("cap")
    app.capability("agent", kind="agent", tools=[{"name": "lookup_order"}])
    return app


def chat(app: FakeApp, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    turn = chat_completions.read_chat_turn(
        {"model": "cap", "user": "end-user", **body}, headers or {}
    )
    return app.container.turns.serve(WS, turn.command)


def respond(app: FakeApp, body: dict[str, Any]) -> str:
    """One response: its id."""
    turn = responses_door.read_response_turn({"model": "cap", "user": "end-user", **body}, {})
    result = app.container.turns.serve(WS, turn.command)
    return str(response_frames.served_response(result, turn.echo)["id"])


def opened(app: FakeApp) -> tuple[set[str], dict[Any, str], int]:
    """What is stored: the session heads, the key bindings, the turns."""
    turns = sum(len(t) for t in app.db.turns.values())
    return set(app.db.heads), dict(app.db.session_keys), turns


def test_a_first_call_on_a_new_key_that_continues_no_pause_opens_nothing(app: FakeApp) -> None:
    before = opened(app)

    with pytest.raises(ToolCallsMismatch):
        chat(app, {"messages": CONTINUATION}, KEYED)

    assert opened(app) == before
    # The key opens its session on its first call that can be served.
    assert chat(app, {"messages": [CONTINUATION[0]]}, KEYED).recorded


def test_a_continuation_on_a_key_whose_session_was_erased_opens_nothing(app: FakeApp) -> None:
    first = chat(app, {"messages": [CONTINUATION[0]]}, KEYED).session_id
    app.container.sessions.delete(WS, str(first))  # as an erasure does, key released
    before = opened(app)

    with pytest.raises(ToolCallsMismatch):
        chat(app, {"messages": CONTINUATION}, KEYED)

    assert opened(app) == before
    assert not any(h.get("externalRef") == "end-user" for h in app.db.heads.values())


def test_a_continuation_on_a_key_whose_session_is_being_deleted_opens_nothing(
    app: FakeApp,
) -> None:
    first = chat(app, {"messages": [CONTINUATION[0]]}, KEYED).session_id
    app.db.stores.sessions.begin_deletion(str(first), WS, "now")  # the key still names it
    before = set(app.db.heads)

    with pytest.raises(ToolCallsMismatch):
        chat(app, {"messages": CONTINUATION}, KEYED)

    assert set(app.db.heads) == before


def test_a_first_keyed_call_the_model_cannot_take_opens_nothing(app: FakeApp) -> None:
    before = opened(app)
    body = {"model": "agent", "messages": [CONTINUATION[0]], "tools": CLASHING}

    with pytest.raises(ValidationFailed):
        chat(app, body, KEYED)

    assert opened(app) == before


def test_a_new_responses_conversation_refused_opens_nothing(app: FakeApp) -> None:
    before = opened(app)
    history = [
        {"type": "message", "role": "user", "content": "earlier"},
        {"type": "message", "role": "assistant", "content": "noted"},
        {"type": "message", "role": "user", "content": "now"},
    ]
    tools = [{"type": "function", "name": "lookup_order", "parameters": {}}]

    with pytest.raises(ValidationFailed):
        respond(app, {"model": "agent", "input": history, "tools": tools})

    assert opened(app) == before


def test_a_refused_turn_after_an_older_response_opens_no_fork(app: FakeApp) -> None:
    first = respond(app, {"model": "agent", "input": "one"})
    respond(app, {"model": "agent", "input": "two", "previous_response_id": first})
    before = opened(app)
    older = {"model": "agent", "input": "again", "previous_response_id": first}
    tools = [{"type": "function", "name": "lookup_order", "parameters": {}}]

    with pytest.raises(ValidationFailed):
        respond(app, {**older, "tools": tools})

    assert opened(app) == before


def test_a_refused_first_response_binds_no_conversation(app: FakeApp) -> None:
    conversation = app.container.conversations.create(WS, {}, ())
    tools = [{"type": "function", "name": "lookup_order", "parameters": {}}]

    with pytest.raises(ValidationFailed):
        respond(
            app, {"model": "agent", "input": "hi", "conversation": conversation.id, "tools": tools}
        )

    bound = app.container.conversations.get(WS, conversation.id)
    assert (bound.capability_id, bound.external_ref) == (None, None)
    respond(app, {"model": "agent", "input": "hi", "conversation": conversation.id})
    assert app.container.conversations.get(WS, conversation.id).capability_id == "agent"


# -- a turn given up at its first second (the slow-turn cap) ---------------------------


def given_up(work: Any) -> None:
    """Run ``work`` as a turn that was given up (over the workspace's cap of slow turns at
    its first second): it stops at its first write."""
    abandonment = Abandonment()
    assert abandonment.abandon()
    with pytest.raises(TurnAbandoned):
        run_abandonable(abandonment, work)


def live(app: FakeApp) -> set[str]:
    """The sessions that are not deleted."""
    alive = set()
    for session_id in app.db.heads:
        try:
            app.container.sessions.get(WS, session_id)
        except SessionNotFound:
            continue
        alive.add(session_id)
    return alive


def test_a_turn_given_up_removes_the_key_session_it_opened(app: FakeApp) -> None:
    before = live(app)

    given_up(lambda: chat(app, {"messages": [CONTINUATION[0]]}, KEYED))

    assert live(app) == before
    # The key opens a session of its own on its next call, which is served.
    assert chat(app, {"messages": [CONTINUATION[0]]}, KEYED).recorded


def test_a_turn_given_up_removes_the_conversation_and_the_fork_it_opened(app: FakeApp) -> None:
    before = live(app)
    given_up(lambda: respond(app, {"input": "Hello."}))
    assert live(app) == before

    first = respond(app, {"input": "One."})
    respond(app, {"input": "Two.", "previous_response_id": first})
    kept = live(app)
    # After an older response: a fork at its answer, removed with the refused turn.
    given_up(lambda: respond(app, {"input": "Other.", "previous_response_id": first}))
    assert live(app) == kept
