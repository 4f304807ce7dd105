"""Agent turns through the serving path (TurnService + Answerer + the tool loop) over
fakes: the principal each tool call carries, the events a streaming door sees, the
bounds a capability and the deployment set, and the trace of a turn that fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import ModelStep
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.tools import ToolCall, ToolDefinition, ToolOutcome, ToolRequest, ToolRound
from convo_memory.domain.turns import AnswerDelta, ToolFinished, TurnBegun
from convo_memory.edge.turn_edge import BufferedEvents
from convo_memory.ports import TextSink
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import deltas, predict, session_message

PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
TRACK = ToolCall("lookup_order", {"orderId": "12345"}, '{"status": "shipped", "eta": "Friday"}')


def agent_app(provider: FakeProvider | None = None, **capability: Any) -> FakeApp:
    app = fake_app(provider=provider or FakeProvider("It ships Friday.", tool_calls=[TRACK]))
    app.capability("cap-agent", kind="agent", tools=[{"name": "lookup_order"}], **capability)
    return app


def test_every_tool_call_carries_the_sessions_principal_and_the_run() -> None:
    app = agent_app()
    sid = app.session("cap-agent", principal=PRINCIPAL)

    prediction = predict(app.container, WS, "cap-agent", "where is order 12345?", sid)

    [call] = app.toolbox.calls
    assert call.context.principal == PRINCIPAL
    assert (call.context.session_id, call.context.capability_id, call.context.workspace_id) == (
        sid,
        "cap-agent",
        WS,
    )
    assert call.context.run_id == prediction.run_id
    run = app.db.stores.runs.get_run(WS, prediction.run_id or "")
    assert run is not None and run["principal"] == PRINCIPAL
    assert [s["principal"] for s in run["steps"]] == [PRINCIPAL]
    assert (run["status"], run["stopReason"], run["modelCalls"], run["maxToolSteps"]) == (
        "completed",
        "answered",
        2,
        5,
    )


def test_a_stateless_agent_turn_sends_a_null_principal() -> None:
    app = agent_app()

    prediction = predict(app.container, WS, "cap-agent", "where is order 12345?", None)

    assert [c.context.principal for c in app.toolbox.calls] == [None]
    assert [c.context.session_id for c in app.toolbox.calls] == [None]
    run = app.db.stores.runs.get_run(WS, prediction.run_id or "")
    assert run is not None and run["principal"] is None and run["sessionId"] is None


def test_a_session_without_a_principal_sends_null_on_the_messages_door() -> None:
    app = agent_app()
    sid = app.session("cap-agent")
    session_message(app.container, WS, sid, "where is order 12345?")
    assert [c.context.principal for c in app.toolbox.calls] == [None]


def test_a_streaming_agent_turn_sends_tool_events_then_the_answer_as_it_is_written() -> None:
    app = agent_app()
    sid = app.session("cap-agent", principal=PRINCIPAL)
    events = BufferedEvents()

    prediction = predict(
        app.container, WS, "cap-agent", "where is order 12345?", sid, events=events
    )

    begun, tool, *answer = events
    assert begun == TurnBegun(prediction.reply_id, prediction.created, sid, user_seq=1)
    assert tool == ToolFinished("lookup_order", "ok")
    assert all(isinstance(event, AnswerDelta) for event in answer)
    assert len(answer) > 1  # streamed word by word, after the tool
    assert "".join(deltas(answer)) == prediction.output == "It ships Friday."


def test_with_a_content_filter_tool_events_stream_but_the_answer_waits_for_the_filter() -> None:
    app = fake_app(provider=FakeProvider("the forbidden ETA", tool_calls=[TRACK]))
    app.capability(
        "cap-agent",
        kind="agent",
        tools=[{"name": "lookup_order"}],
        contentFilter={"type": "embedded", "blockedTerms": ["forbidden"], "withheldMessage": "no"},
    )
    sid = app.session("cap-agent")
    events = BufferedEvents()

    prediction = predict(
        app.container, WS, "cap-agent", "where is order 12345?", sid, events=events
    )

    # The flagged text never reached the sink: one delta, the withheld message.
    begun, tool, answer = events
    assert isinstance(begun, TurnBegun) and isinstance(tool, ToolFinished)
    assert (tool.name, answer) == ("lookup_order", AnswerDelta("no"))
    assert (prediction.output, prediction.withheld) == ("no", True)
    assert app.db.digests_of(sid) == {}  # a withheld answer keeps no digest


def test_the_digest_holds_the_real_tool_results_of_the_turn() -> None:
    app = agent_app()
    app.toolbox.outputs["lookup_order"] = '{"status": "shipped", "eta": "2025-06-14"}'
    sid = app.session("cap-agent")

    prediction = predict(app.container, WS, "cap-agent", "where is order 12345?", sid)

    assert prediction.turn is not None
    [(digest, _)] = app.db.digests_of(sid).values()
    output = app.toolbox.outputs["lookup_order"]
    assert isinstance(output, str)
    real = ToolCall("lookup_order", {"orderId": "12345"}, output)
    assert digest.text == build_tool_digest([real], 2_000)
    assert "2025-06-14" in digest.text and "Friday" not in digest.text


def test_a_failed_tool_is_in_the_digest_with_its_status() -> None:
    app = agent_app()
    app.toolbox.outputs["lookup_order"] = ToolOutcome("timeout", "no answer within 10.0 s")
    sid = app.session("cap-agent")

    predict(app.container, WS, "cap-agent", "where is order 12345?", sid)

    [(digest, _)] = app.db.digests_of(sid).values()
    assert digest.text.endswith("-> [timeout] no answer within 10.0 s")


class Insistent:
    """A model that asks for a tool at every step, recording each step's timeout."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self.finals: list[bool] = []

    def complete(self, prompt: Any) -> Any:
        raise AssertionError("agents use step")

    def stream(self, prompt: Any) -> Any:
        raise AssertionError("agents use step")

    def step(
        self,
        prompt: Any,
        rounds: Sequence[ToolRound],
        tools: Sequence[ToolDefinition],
        *,
        timeout: float,
        final: bool = False,
        on_text: TextSink | None = None,
        choice: Any = None,
    ) -> ModelStep:
        self.timeouts.append(timeout)
        self.finals.append(final)
        if final:
            return ModelStep("done")
        return ModelStep("", (ToolRequest(f"c{len(rounds)}", "lookup_order", {}),))


def test_max_tool_steps_of_the_capability_bounds_the_rounds() -> None:
    model = Insistent()
    app = fake_app(provider=model)  # type: ignore[arg-type]
    app.toolbox.outputs["lookup_order"] = "x"
    app.capability("cap-agent", kind="agent", tools=[{"name": "lookup_order"}], maxToolSteps=2)

    prediction = predict(app.container, WS, "cap-agent", "go", None)

    assert len(app.toolbox.calls) == 2 and model.finals == [False, False, True]
    run = app.db.stores.runs.get_run(WS, prediction.run_id or "")
    assert run is not None and (run["stopReason"], run["modelCalls"]) == ("step_bound", 3)


@pytest.mark.parametrize(("setting", "expected"), [({}, 25.0), ({"turn_deadline_seconds": 7}, 7.0)])
def test_the_turn_deadline_setting_bounds_the_loop(setting: dict, expected: float) -> None:
    model = Insistent()
    app = fake_app(provider=model, monotonic=lambda: 50.0, **setting)  # type: ignore[arg-type]
    app.toolbox.outputs["lookup_order"] = "x"
    app.capability("cap-agent", kind="agent", tools=[{"name": "lookup_order"}], maxToolSteps=1)

    predict(app.container, WS, "cap-agent", "go", None)

    # The clock stands still: every call gets the whole deadline; tools their 10 s.
    assert model.timeouts == [expected, expected]
    assert [c.timeout for c in app.toolbox.calls] == [min(10.0, expected)]


def test_a_turn_that_fails_after_its_tools_ran_still_leaves_their_trace() -> None:
    class FailsAfterTools(FakeProvider):
        def step(self, prompt: Any, rounds: Sequence[ToolRound], *args: Any, **kw: Any) -> Any:
            if rounds:
                raise ProviderError("Model provider error: boom.")
            return super().step(prompt, rounds, *args, **kw)

    app = agent_app(FailsAfterTools("never", tool_calls=[TRACK]))
    sid = app.session("cap-agent", principal=PRINCIPAL)

    with pytest.raises(ProviderError):
        predict(app.container, WS, "cap-agent", "where is order 12345?", sid)

    [run_id] = app.db.runs
    trace = app.db.stores.runs.get_run(WS, run_id)
    assert trace is not None and trace["status"] == "failed" and trace["output"] is None
    assert [(s["tool"], s["principal"]) for s in trace["steps"]] == [("lookup_order", PRINCIPAL)]
    assert app.db.messages_of(sid) == []  # nothing recorded: the turn failed
