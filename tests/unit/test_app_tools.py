"""The app's own tools through the serving path, over fakes (v4): a turn that pauses for
them, is continued with their results and recorded once when it ends; what it costs;
the refusals (409 tool_calls_mismatch, 422) that change nothing; abandoned pauses; the
race of two continuations; the stateless pass-through; the agent's own tools beside."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.domain.errors import (
    PayloadTooLarge,
    ProviderError,
    StoreUnavailable,
    ToolCallsMismatch,
    ValidationFailed,
)
from convo_memory.domain.generation import GenerationOptions
from convo_memory.domain.item_ids import app_call_id
from convo_memory.domain.jobs import RepairJob
from convo_memory.domain.tools import ToolChoice, ToolReply, ToolRequest, ToolRound
from convo_memory.domain.turns import AnswerDelta, AppToolCalls, SessionById, TurnCommand, UserText
from convo_memory.edge.turn_edge import BufferedEvents
from tests.fakes.adapters import FakeProvider, FakeToolbox, ScriptedModel
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import app_tools, app_turn, predict

WEATHER = app_tools("get_weather")
CALL = [("call_w", "get_weather", {"city": "Paris"})]


def app_of(model: ScriptedModel, kind: str = "generative", **settings: Any) -> FakeApp:
    toolbox = FakeToolbox({"lookup_order": '{"status": "shipped"}'})
    app = fake_app(provider=model, toolbox_for=lambda capability: toolbox, **settings)  # type: ignore[arg-type]
    if kind == "agent":
        app.capability("cap", kind="agent", tools=[{"name": "lookup_order"}])
    else:
        app.capability("cap")
    app.toolbox = toolbox
    return app


def paused(app: FakeApp, text: str = "What's the weather in Paris?") -> tuple[str, Any]:
    sid = app.session("cap")
    result = app_turn(app.container, WS, "cap", text, sid, tools=WEATHER)
    return sid, result


def messages(app: FakeApp, sid: str) -> list[dict[str, Any]]:
    page, _ = app.container.sessions.messages(WS, sid, 100)
    return [m.to_json_dict() for m in page]


# -- pause and continue ---------------------------------------------------------------


def test_a_step_that_calls_an_app_tool_pauses_the_turn_and_records_nothing_yet() -> None:
    app = app_of(ScriptedModel(CALL, "It is sunny."))
    sid, result = paused(app)

    assert (result.finish, result.turn, result.recorded) == ("tool_calls", None, False)
    # (v5) The app is shown an id the service minted, naming the turn's place.
    shown = app_call_id(sid, 1, 0)
    assert shown is not None and len(shown) <= 40
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        (shown, "get_weather", {"city": "Paris"})
    ]
    assert messages(app, sid) == []
    context = app.container.sessions.context(WS, sid)
    assert context.pending is not None
    assert (context.pending.user_seq, [c.call_id for c in context.pending.tool_calls]) == (
        1,
        ["call_w"],
    )
    # The model was offered the app's tool.
    assert [t.name for t in app.provider.steps[0].tools] == ["get_weather"]


def test_the_continuation_sees_the_pause_its_calls_and_results_and_is_recorded_once() -> None:
    model = ScriptedModel(CALL, "It is sunny in Paris.")
    app = app_of(model)
    sid, _ = paused(app)

    result = app_turn(app.container, WS, "cap", [("call_w", "sunny, 24C")], sid, tools=WEATHER)

    assert (result.output, result.finish, result.recorded) == (
        "It is sunny in Paris.",
        "stop",
        True,
    )
    assert result.turn is not None and (result.turn.user_seq, result.turn.assistant_seq) == (1, 2)
    first, second = model.steps
    assert second.prompt.system == first.prompt.system
    assert second.prompt.messages == first.prompt.messages
    [round_] = second.rounds
    assert [r.call_id for r in round_.requests] == ["call_w"]
    assert [(r.call_id, r.output) for r in round_.replies] == [("call_w", "sunny, 24C")]
    assert [(m["role"], m["content"], m["abandoned"]) for m in messages(app, sid)] == [
        ("user", "What's the weather in Paris?", False),
        ("assistant", "It is sunny in Paris.", False),
    ]
    assert app.container.sessions.context(WS, sid).pending is None


def test_the_apps_call_and_result_join_the_digest_the_trace_and_the_prompt_record() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."))
    sid, _ = paused(app)
    result = app_turn(app.container, WS, "cap", [("call_w", "sunny, 24C")], sid, tools=WEATHER)

    [digest] = app.db.digests[sid].values()
    assert digest.digest.tools == ["get_weather"]
    assert 'get_weather({"city": "Paris"}) -> sunny, 24C' in digest.digest.text
    run = app.db.stores.runs.get_run(WS, result.run_id or "")
    assert run is not None and run["status"] == "completed"
    assert [
        (s["kind"], s["name"], s["input"], s["output"], s["principal"]) for s in run["steps"]
    ] == [("app", "get_weather", {"city": "Paris"}, "sunny, 24C", None)]
    sent = app.container.sessions.sent_prompt(WS, sid, 2)
    assert (sent.input, sent.app_tools) == ("What's the weather in Paris?", ("get_weather",))


def test_a_later_turn_sees_the_apps_result_in_the_fenced_digest() -> None:
    model = ScriptedModel(CALL, "Sunny.", "You asked about Paris.")
    app = app_of(model)
    sid, _ = paused(app)
    app_turn(app.container, WS, "cap", [("call_w", "sunny, 24C")], sid, tools=WEATHER)

    app_turn(app.container, WS, "cap", "What did the weather tool say?", sid, tools=WEATHER)

    later = model.steps[-1].prompt
    nonce = later.fence_nonce
    shown = "\n".join(m.content for m in later.messages)
    assert f'<data-{nonce} kind="tool-results"' in shown and "sunny, 24C" in shown


def test_a_continuation_may_call_tools_again_and_pause_again_at_the_same_position() -> None:
    model = ScriptedModel(CALL, [("call_t", "get_weather", {"city": "Rome"})], "Both sunny.")
    app = app_of(model)
    sid, _ = paused(app)

    again = app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)
    # The second pause's call is the turn's second call of the app's tools.
    assert (again.finish, [c.call_id for c in again.tool_calls]) == (
        "tool_calls",
        [app_call_id(sid, 1, 1)],
    )
    pending = app.container.sessions.context(WS, sid).pending
    assert pending is not None and pending.user_seq == 1
    with pytest.raises(ToolCallsMismatch):  # the first pause's call is answered already
        app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)

    # The id the app was shown finds the provider's own.
    minted = str(app_call_id(sid, 1, 1))
    done = app_turn(app.container, WS, "cap", [(minted, "also sunny")], sid, tools=WEATHER)
    assert done.output == "Both sunny." and done.turn is not None and done.turn.user_seq == 1
    assert len(model.steps[-1].rounds) == 2
    assert [m["seq"] for m in messages(app, sid)] == [1, 2]


def test_max_tool_steps_counts_the_apps_rounds_too() -> None:
    model = ScriptedModel(CALL)  # asks for the app's tool at every step it may
    app = app_of(model)
    sid, result = paused(app)
    while result.tool_calls:
        # The model repeats its call id: the app is handed a unique one (the model too).
        assert len({c.call_id for c in result.tool_calls}) == 1
        answers = [(call.call_id, "cloudy") for call in result.tool_calls]
        result = app_turn(app.container, WS, "cap", answers, sid, tools=WEATHER)

    # Five rounds (a generative capability's default), then the answer without tools.
    assert [step.final for step in model.steps] == [False] * 5 + [True]
    assert len({r.call_id for r in model.steps[-1].rounds[-1].requests} | {"call_w"}) == 2
    assert result.recorded and [m["role"] for m in messages(app, sid)] == ["user", "assistant"]


# -- refusals that change nothing ------------------------------------------------------


@pytest.mark.parametrize(
    "results",
    [
        [("call_x", "r")],  # unknown
        [],  # none at all: refused as input (422), below
        [("call_w", "r"), ("call_w", "r")],  # the same call twice
        [("call_w", "r"), ("call_y", "r")],  # one too many
    ],
)
def test_results_that_do_not_answer_exactly_the_pending_calls_are_409_and_change_nothing(
    results: list[tuple[str, str]],
) -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."))
    sid, _ = paused(app)
    before = app.db.dump()

    with pytest.raises(ToolCallsMismatch if results else ValidationFailed):
        app_turn(app.container, WS, "cap", results, sid, tools=WEATHER)

    assert app.db.dump() == before


def test_a_refused_continuation_does_not_even_move_the_activity_mark() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."), pending_turn_seconds=7200)
    sid, _ = paused(app)
    app.clock.advance(3601)  # past the mark's granularity: a served turn would move it
    app.settle()
    before = app.db.dump()

    with pytest.raises(ToolCallsMismatch):
        app_turn(app.container, WS, "cap", [("call_x", "r")], sid, tools=WEATHER)

    assert app.db.dump() == before and "touch" not in app.db.calls


def test_a_continuation_of_a_session_that_waits_for_nothing_is_409() -> None:
    app = app_of(ScriptedModel("hello"))
    sid = app.session("cap")
    app.settle()
    with pytest.raises(ToolCallsMismatch, match="no turn waiting"):
        app_turn(app.container, WS, "cap", [("call_w", "r")], sid, tools=WEATHER)
    assert app.db.writes() == 0 and messages(app, sid) == []


def test_a_tool_result_over_the_input_limit_is_413() -> None:
    app = app_of(ScriptedModel(CALL, "x"), max_input_chars=100)
    sid, _ = paused(app, "weather?")
    with pytest.raises(PayloadTooLarge):
        app_turn(app.container, WS, "cap", [("call_w", "r" * 101)], sid, tools=WEATHER)


def test_an_app_tool_named_like_the_agents_own_is_422_before_anything_is_written() -> None:
    app = app_of(ScriptedModel("hi"), kind="agent")
    sid = app.session("cap")
    app.settle()
    with pytest.raises(ValidationFailed, match="lookup_order"):
        app_turn(app.container, WS, "cap", "hi", sid, tools=app_tools("lookup_order"))
    assert messages(app, sid) == [] and "touch" not in app.db.calls


def test_structured_output_is_422_on_a_provider_that_does_not_take_it() -> None:
    app = app_of(ScriptedModel("{}"))
    options = GenerationOptions(response_format={"type": "json_object"})
    command = TurnCommand("cap", None, UserText("hi"), options=options)
    with pytest.raises(ValidationFailed, match="response_format"):
        app.container.turns.serve(WS, command)


# -- abandoned pauses -----------------------------------------------------------------


def test_a_new_user_message_first_records_the_pending_turn_as_abandoned() -> None:
    model = ScriptedModel(("Let me check.", CALL), "Hello again.")
    app = app_of(model)
    sid, pause = paused(app)
    assert pause.output == "Let me check."

    result = predict(app.container, WS, "cap", "never mind", sid)

    assert result.turn is not None and result.turn.user_seq == 3
    assert [(m["seq"], m["content"], m["abandoned"]) for m in messages(app, sid)] == [
        (1, "What's the weather in Paris?", False),
        (2, "Let me check.", True),
        (3, "never mind", False),
        (4, "Hello again.", False),
    ]
    # The new turn's prompt replays the abandoned turn.
    assert [m.content for m in model.steps[-1].prompt.messages][:2] == [
        "What's the weather in Paris?",
        "Let me check.",
    ]
    assert app.metrics.counts["PausedTurnsAbandoned"] == 1


def test_a_pause_older_than_pending_turn_seconds_is_abandoned_and_its_continuation_409() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."), pending_turn_seconds=60)
    sid, _ = paused(app)
    app.clock.advance(61)
    assert app.container.sessions.context(WS, sid).pending is None

    with pytest.raises(ToolCallsMismatch, match="abandoned"):
        app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)

    assert [(m["content"], m["abandoned"]) for m in messages(app, sid)] == [
        ("What's the weather in Paris?", False),
        ("", True),
    ]


def test_the_retention_run_abandons_pauses_that_wait_no_more() -> None:
    from datetime import UTC, datetime

    app = app_of(ScriptedModel(CALL), pending_turn_seconds=60)
    sid, _ = paused(app)
    early = app.container.retention.run(datetime.fromtimestamp(app.clock() + 30, UTC))
    late = app.container.retention.run(datetime.fromtimestamp(app.clock() + 61, UTC))

    assert (early.pauses_abandoned, late.pauses_abandoned) == (0, 1)
    assert [m["abandoned"] for m in messages(app, sid)] == [False, True]


# -- exactly once ------------------------------------------------------------------------


def test_two_continuations_racing_on_one_pause_record_one_turn_and_the_loser_gets_409() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."))
    sid, _ = paused(app)
    won: list[Any] = []

    def the_other_request_lands_first(db: Any) -> None:
        won.append(app_turn(app.container, WS, "cap", [("call_w", "A")], sid, tools=WEATHER))

    app.db.before_append = the_other_request_lands_first
    with pytest.raises(ToolCallsMismatch, match="first"):
        app_turn(app.container, WS, "cap", [("call_w", "B")], sid, tools=WEATHER)

    assert won and won[0].recorded
    assert [m["seq"] for m in messages(app, sid)] == [1, 2]
    [digest] = app.db.digests[sid].values()
    assert "-> A" in digest.digest.text


def test_a_continued_turn_whose_write_fails_is_repaired_at_the_pauses_position() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."))
    sid, _ = paused(app)
    app.db.fail_always["append_turn"] = StoreUnavailable("throttled")

    result = app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)
    assert (result.recorded, result.output) == (False, "Sunny.")
    del app.db.fail_always["append_turn"]
    [job] = app.repair_queue.bodies

    assert app.container.recorder.repair(RepairJob.model_validate(job)) == "recorded"
    assert [(m["seq"], m["content"]) for m in messages(app, sid)] == [
        (1, "What's the weather in Paris?"),
        (2, "Sunny."),
    ]
    assert app.container.recorder.repair(RepairJob.model_validate(job)) == "already_recorded"


def test_a_repair_of_a_pause_another_request_ended_is_superseded_never_appended() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny.", "Hi."))
    sid, _ = paused(app)
    app.db.fail_always["append_turn"] = StoreUnavailable("throttled")
    app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)
    del app.db.fail_always["append_turn"]
    [job] = app.repair_queue.bodies
    predict(app.container, WS, "cap", "something else", sid)  # abandons the pause

    assert app.container.recorder.repair(RepairJob.model_validate(job)) == "superseded"
    assert [m["content"] for m in messages(app, sid)][:2] == ["What's the weather in Paris?", ""]


# -- what it costs -------------------------------------------------------------------------


def test_a_turn_offered_app_tools_that_calls_none_costs_what_any_turn_costs() -> None:
    plain_app = app_of(ScriptedModel("hi"))
    tools_app = app_of(ScriptedModel("hi"))
    sessions = [plain_app.session("cap"), tools_app.session("cap")]
    for app in (plain_app, tools_app):
        app.settle()
    predict(plain_app.container, WS, "cap", "hello", sessions[0])
    app_turn(tools_app.container, WS, "cap", "hello", sessions[1], tools=WEATHER)

    assert tools_app.db.calls == plain_app.db.calls


def test_a_pause_costs_one_write_and_its_continuation_what_a_tool_turn_writes() -> None:
    app = app_of(ScriptedModel(CALL, "Sunny."))
    sid = app.session("cap")
    app.settle()
    app_turn(app.container, WS, "cap", "weather in Paris?", sid, tools=WEATHER)
    assert dict(app.db.calls) == {"load_turn_state": 1, "keep_pending": 1}
    app.settle()
    app_turn(app.container, WS, "cap", [("call_w", "sunny")], sid, tools=WEATHER)
    # The turn (over the pause), its digest and its run trace, as an agent turn writes.
    assert dict(app.db.calls) == {
        "load_turn_state": 1,
        "append_turn": 1,
        "put_digest": 1,
        "put_run": 1,
    }


# -- the agent's own tools beside, streaming, stateless -------------------------------------


def test_an_agents_tools_called_in_the_pausing_step_run_first_and_are_traced_at_the_pause() -> None:
    both = [("c1", "lookup_order", {"orderId": "1"}), ("c2", "get_weather", {"city": "Oslo"})]
    model = ScriptedModel(both, "Shipped, and sunny.")
    app = app_of(model, kind="agent")
    sid = app.session("cap", principal={"user_id": "u1"})

    pause = app_turn(app.container, WS, "cap", "order 1 and Oslo weather", sid, tools=WEATHER)

    assert [c.name for c in app.toolbox.calls] == ["lookup_order"]
    assert [c.call_id for c in pause.tool_calls] == [app_call_id(sid, 1, 0)]
    run = app.db.stores.runs.get_run(WS, pause.run_id or "")
    assert run is not None and (run["status"], run["stopReason"]) == ("paused", "paused")
    assert [s["kind"] for s in run["steps"]] == ["service"]
    offered = [t.name for t in model.steps[0].tools]
    assert offered == ["lookup_order", "get_weather"]

    done = app_turn(app.container, WS, "cap", [("c2", "sunny")], sid, tools=WEATHER)
    [round_] = model.steps[-1].rounds
    assert [r.output for r in round_.replies] == ['{"status": "shipped"}', "sunny"]
    final = app.db.stores.runs.get_run(WS, done.run_id or "")
    assert done.run_id == pause.run_id and final is not None
    assert [(s["kind"], s["name"]) for s in final["steps"]] == [
        ("service", "lookup_order"),
        ("app", "get_weather"),
    ]
    assert [s["principal"] for s in final["steps"]] == [{"user_id": "u1"}, None]


def test_a_streamed_pause_sends_its_text_then_the_calls() -> None:
    app = app_of(ScriptedModel(("Checking.", CALL)))
    sid = app.session("cap")
    events = BufferedEvents()

    app_turn(app.container, WS, "cap", "weather?", sid, tools=WEATHER, events=events)

    kinds = [type(e).__name__ for e in events]
    assert kinds[-2:] == ["AnswerDelta", "AppToolCalls"]
    last = events[-1]
    assert isinstance(last, AppToolCalls) and [c.name for c in last.calls] == ["get_weather"]
    assert [e.text for e in events if isinstance(e, AnswerDelta)] == ["Checking."]


def test_tool_choice_reaches_the_first_model_call_of_a_request_only() -> None:
    model = ScriptedModel([("c1", "lookup_order", {})], "done")
    app = app_of(model, kind="agent")
    sid = app.session("cap")
    forced = app_tools("get_weather", choice=ToolChoice("required", None, False))

    app_turn(app.container, WS, "cap", "hi", sid, tools=forced)

    assert [s.choice.mode for s in model.steps] == ["required", "auto"]
    assert {s.choice.parallel for s in model.steps} == {False}


def test_a_stateless_turn_passes_the_clients_tool_exchange_through_and_stores_nothing() -> None:
    model = ScriptedModel(CALL, "It is sunny.")
    app = app_of(model)
    app.settle()

    pause = app_turn(app.container, WS, "cap", "weather in Paris?", tools=WEATHER)
    assert [c.call_id for c in pause.tool_calls] == ["call_w"] and pause.session_id is None
    exchange = ToolRound(
        "",
        (ToolRequest("call_w", "get_weather", {"city": "Paris"}),),
        (ToolReply("call_w", "get_weather", "sunny"),),
    )
    done = app_turn(
        app.container, WS, "cap", "weather in Paris?", tools=WEATHER, rounds=(exchange,)
    )

    assert done.output == "It is sunny." and done.recorded is False
    assert model.steps[-1].rounds == (exchange,)
    assert app.db.writes() == 0


def test_tool_results_without_a_session_are_refused() -> None:
    app = app_of(ScriptedModel("x"))
    with pytest.raises(ValidationFailed):
        app_turn(app.container, WS, "cap", [("call_w", "r")])


def test_a_model_whose_tool_calls_cannot_be_kept_fails_the_pause_as_a_provider_error() -> None:
    huge = [("call_w", "get_weather", {"blob": "x" * 200_000})]
    app = app_of(ScriptedModel(huge))
    sid = app.session("cap")
    with pytest.raises(ProviderError, match="too large"):
        app_turn(app.container, WS, "cap", "weather?", sid, tools=WEATHER)
    assert app.container.sessions.context(WS, sid).pending is None


def test_the_command_of_a_native_door_still_answers_with_no_tools() -> None:
    app = app_of(ScriptedModel("plain"))
    sid = app.session("cap")
    result = app.container.turns.serve(WS, TurnCommand("cap", SessionById(sid), UserText("hi")))
    assert (result.output, result.tool_calls, result.finish) == ("plain", (), "stop")
    assert isinstance(app.provider, ScriptedModel) and not isinstance(app.provider, FakeProvider)
