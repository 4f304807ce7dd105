"""The tool loop (services/agent_loop.py) with a scripted model and fake tools: rounds,
the step bound, the deadline, failing tools, streaming and tool events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import ModelStep, TokenUsage
from convo_memory.domain.prompt import build_prompt
from convo_memory.domain.tools import (
    ToolCallContext,
    ToolDefinition,
    ToolOutcome,
    ToolRequest,
    ToolRound,
)
from convo_memory.ports import TextSink
from convo_memory.services.agent_loop import (
    MODEL_RESULT_MAX_CHARS,
    STEP_SEPARATOR,
    AgentLoop,
)
from tests.fakes.adapters import FakeToolbox

PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
CONTEXT = ToolCallContext("ws_1", "cap_1", "ses_1", "run_1", PRINCIPAL)
PROMPT = build_prompt(
    instructions=None, summary=None, digests=(), replayed=(), user_input="where is 42?"
)


class Clock:
    """A monotonic clock that tools and models move forward."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ScriptedModel:
    """Answers each step with the next scripted step; records what it was given."""

    def __init__(self, *script: ModelStep, clock: Clock | None = None, cost: float = 0.0) -> None:
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.clock = clock
        self.cost = cost

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
        self.calls.append(
            {"rounds": tuple(rounds), "tools": tuple(tools), "timeout": timeout, "final": final}
        )
        if self.clock is not None:
            self.clock.now += self.cost
        step = self.script.pop(0)
        if on_text is not None:
            words = step.text.split(" ")
            for index, word in enumerate(words):
                on_text(word if index == len(words) - 1 else word + " ")
        return step


def asks(*names: str) -> ModelStep:
    return ModelStep("", tuple(ToolRequest(f"c{i}", n, {"q": n}) for i, n in enumerate(names)))


def run(
    model: ScriptedModel,
    toolbox: FakeToolbox,
    *,
    max_steps: int = 5,
    clock: Clock | None = None,
    deadline: float = 1_000.0,
    tool_timeout: float = 10.0,
    **kwargs: Any,
) -> Any:
    loop = AgentLoop(tool_timeout_seconds=tool_timeout, monotonic=clock or Clock())
    return loop.run(
        model, toolbox, PROMPT, context=CONTEXT, max_steps=max_steps, deadline=deadline, **kwargs
    )


def test_a_tool_round_then_an_answer() -> None:
    # Given a model that asks for two tools, then answers
    toolbox = FakeToolbox({"track": "ETA Friday", "weather": "sunny"})
    model = ScriptedModel(asks("track", "weather"), ModelStep("It arrives Friday."))
    events: list[tuple[str, str]] = []

    result = run(model, toolbox, on_tool=lambda name, status: events.append((name, status)))

    # Then both tools ran once, in order, with the session's principal
    assert [(c.name, c.input, c.context.principal) for c in toolbox.calls] == [
        ("track", {"q": "track"}, PRINCIPAL),
        ("weather", {"q": "weather"}, PRINCIPAL),
    ]
    assert events == [("track", "ok"), ("weather", "ok")]
    # And the model saw their results in the second call, matched to its requests
    [round_] = model.calls[1]["rounds"]
    assert [(r.call_id, r.output, r.is_error) for r in round_.replies] == [
        ("c0", "ETA Friday", False),
        ("c1", "sunny", False),
    ]
    assert (result.text, result.model_calls, result.stop_reason) == (
        "It arrives Friday.",
        2,
        "answered",
    )
    assert [(c.name, c.output, c.status, c.principal) for c in result.calls] == [
        ("track", "ETA Friday", "ok", PRINCIPAL),
        ("weather", "sunny", "ok", PRINCIPAL),
    ]
    assert all(c.started_at.endswith("Z") and c.duration_ms >= 0 for c in result.calls)
    # The model was offered the toolbox's tools every time
    assert [t.name for t in model.calls[0]["tools"]] == ["track", "weather"]


def test_a_runs_tokens_are_every_model_calls_added_up() -> None:
    toolbox = FakeToolbox({"track": "ETA Friday"})
    first = ModelStep("", asks("track").requests, usage=TokenUsage(1200, 30, 1024, 0))
    second = ModelStep("It arrives Friday.", usage=TokenUsage(1300, 12, 1024, 150))

    result = run(ScriptedModel(first, second), toolbox)

    assert result.usage == TokenUsage(2500, 42, 2048, 150)


def test_a_run_whose_provider_reports_no_tokens_has_none() -> None:
    result = run(ScriptedModel(asks("track"), ModelStep("ok")), FakeToolbox({"track": "x"}))

    assert result.usage is None


def test_a_failing_tool_becomes_an_error_result_and_the_turn_goes_on() -> None:
    toolbox = FakeToolbox({"track": ToolOutcome("error", "HTTP 500: boom")})
    model = ScriptedModel(asks("track", "nope"), ModelStep("Sorry, tracking is down."))

    result = run(model, toolbox)

    replies = model.calls[1]["rounds"][0].replies
    assert [(r.is_error, r.output) for r in replies] == [
        (True, "[error] HTTP 500: boom"),
        (True, "[error] there is no tool named 'nope'"),
    ]
    assert [c.status for c in result.calls] == ["error", "error"]
    assert result.text == "Sorry, tracking is down." and result.stop_reason == "answered"


def test_the_step_bound_asks_for_a_final_answer_without_tools() -> None:
    # Given a model that would call tools forever, and maxToolSteps = 3
    toolbox = FakeToolbox({"track": "still moving"})
    model = ScriptedModel(*[asks("track")] * 3, ModelStep("Best I can say: still moving."))

    result = run(model, toolbox, max_steps=3)

    # Then three rounds of tools, then one last call marked final
    assert len(toolbox.calls) == 3
    assert [c["final"] for c in model.calls] == [False, False, False, True]
    assert len(model.calls[-1]["rounds"]) == 3
    assert (result.text, result.model_calls, result.stop_reason) == (
        "Best I can say: still moving.",
        4,
        "step_bound",
    )


def test_tool_requests_in_the_final_answer_are_ignored() -> None:
    toolbox = FakeToolbox({"track": "x"})
    model = ScriptedModel(asks("track"), asks("track"))

    result = run(model, toolbox, max_steps=1)

    assert len(toolbox.calls) == 1
    assert result.stop_reason == "step_bound"
    assert result.text == (
        "I ran out of tool steps before I could finish my answer. Tools called: track (ok)."
    )


def test_each_call_gets_at_most_the_time_left() -> None:
    clock = Clock()
    toolbox = FakeToolbox({"slow": "done"})
    model = ScriptedModel(asks("slow", "slow"), ModelStep("ok"), clock=clock, cost=6.0)

    run(model, toolbox, clock=clock, deadline=clock.now + 20, tool_timeout=10)

    # The model call started with 20 s left; after it (6 s), each tool had 10 of the 14 s
    # left, and the next model call got what remained.
    assert model.calls[0]["timeout"] == 20
    assert [c.timeout for c in toolbox.calls] == [10, 10]
    assert model.calls[1]["timeout"] == 14


def test_the_deadline_ends_the_loop_with_what_it_has() -> None:
    # Given a model that writes a sentence, asks for a tool, and a tool that eats the time
    clock = Clock()

    class SlowToolbox(FakeToolbox):
        def call(self, *args: Any) -> ToolOutcome:
            outcome = super().call(*args)
            clock.now += 30
            return outcome

    toolbox = SlowToolbox({"track": "in transit"})
    model = ScriptedModel(
        ModelStep("Let me check.", (ToolRequest("c0", "track", {}),)), ModelStep("never")
    )

    result = run(model, toolbox, clock=clock, deadline=clock.now + 20)

    # Then no further model call: the answer is what the model had written
    assert len(model.calls) == 1
    assert (result.text, result.stop_reason) == ("Let me check.", "deadline")
    assert [c.status for c in result.calls] == ["ok"]


def test_a_deadline_with_nothing_written_ends_with_a_sentence_that_says_so() -> None:
    clock = Clock()
    model = ScriptedModel(asks("a", "b"), ModelStep("never"), clock=clock, cost=25)

    result = run(model, FakeToolbox({"a": "1", "b": "2"}), clock=clock, deadline=clock.now + 20)

    # The model's first call used up the time: both tools time out without being called.
    assert result.stop_reason == "deadline"
    assert [(c.name, c.status) for c in result.calls] == [("a", "timeout"), ("b", "timeout")]
    assert result.text == (
        "I ran out of time before I could finish my answer. Tools called: a (timeout), b (timeout)."
    )


def test_a_model_failure_after_the_deadline_ends_with_what_it_has() -> None:
    clock = Clock()

    class FailingLate(ScriptedModel):
        def step(self, *args: Any, **kwargs: Any) -> ModelStep:
            if self.calls:
                clock.now += 50
                self.calls.append({})
                raise ProviderError("Model provider error: could not reach the provider.")
            return super().step(*args, **kwargs)

    result = run(
        FailingLate(asks("t")), FakeToolbox({"t": "1"}), clock=clock, deadline=clock.now + 20
    )

    assert result.stop_reason == "deadline" and [c.name for c in result.calls] == ["t"]


def test_a_model_failure_before_the_deadline_fails_the_turn() -> None:
    class Failing(ScriptedModel):
        def step(self, *args: Any, **kwargs: Any) -> ModelStep:
            raise ProviderError("Model provider error: boom.")

    with pytest.raises(ProviderError):
        run(Failing(), FakeToolbox())


def test_unreadable_tool_arguments_are_not_sent_to_the_tool() -> None:
    toolbox = FakeToolbox({"track": "x"})
    bad = ModelStep("", (ToolRequest("c0", "track", {}, "not valid JSON"),))
    model = ScriptedModel(bad, ModelStep("fine"))

    result = run(model, toolbox)

    assert toolbox.calls == []
    assert result.calls[0].status == "error"
    assert model.calls[1]["rounds"][0].replies[0].output == (
        "[error] the tool was not called: not valid JSON"
    )


def test_streamed_steps_are_joined_and_the_deltas_make_the_answer() -> None:
    toolbox = FakeToolbox({"track": "x"})
    model = ScriptedModel(
        ModelStep("Let me check.", (ToolRequest("c0", "track", {}),)),
        ModelStep("It is on its way."),
    )
    deltas: list[str] = []
    events: list[str] = []

    def on_text(delta: str) -> None:
        deltas.append(delta)
        events.append("delta")

    result = run(
        model,
        toolbox,
        on_text=on_text,
        on_tool=lambda n, s: events.append(f"tool {n} {s}"),
    )

    assert result.text == f"Let me check.{STEP_SEPARATOR}It is on its way."
    assert "".join(deltas) == result.text
    assert events.index("tool track ok") < len(events) - 1  # the tool event precedes the answer
    assert events[events.index("tool track ok") + 1 :] == ["delta"] * 6


def test_what_the_model_sees_of_a_huge_result_is_bounded() -> None:
    huge = "x" * (MODEL_RESULT_MAX_CHARS * 3)
    model = ScriptedModel(asks("dump"), ModelStep("ok"))

    result = run(model, FakeToolbox({"dump": huge}))

    shown = model.calls[1]["rounds"][0].replies[0].output
    assert len(shown) == MODEL_RESULT_MAX_CHARS and shown.endswith("[truncated]")
    assert result.calls[0].output == huge  # the trace and digest cut it themselves


def test_a_toolbox_that_raises_is_still_just_a_tool_error() -> None:
    class Broken(FakeToolbox):
        def call(self, *args: Any) -> ToolOutcome:
            raise RuntimeError("bug")

    model = ScriptedModel(asks("t"), ModelStep("carried on"))
    result = run(model, Broken({"t": "x"}))
    assert [(c.status, c.output) for c in result.calls] == [
        ("error", "the tool call failed unexpectedly")
    ]
    assert result.text == "carried on"


def test_tool_arguments_with_unpaired_surrogates_are_made_encodable() -> None:
    toolbox = FakeToolbox({"t": "x"})
    odd = ModelStep("", (ToolRequest("c0", "t", {"q": "a\ud800b", "n": [{"k\udfff": 1}]}),))
    result = run(ScriptedModel(odd, ModelStep("ok")), toolbox)
    assert toolbox.calls[0].input == {"q": "a\ufffdb", "n": [{"k\ufffd": 1}]}
    assert result.calls[0].input == toolbox.calls[0].input
    json_text = json.dumps(toolbox.calls[0].input, ensure_ascii=False)
    assert json_text.encode("utf-8")  # no longer raises


class DrippingModel(ScriptedModel):
    """Writes its answer word by word, each word taking ``cost`` seconds."""

    def step(self, prompt: Any, rounds: Any, tools: Any, **kwargs: Any) -> ModelStep:
        on_text = kwargs.get("on_text")
        self.calls.append({"rounds": tuple(rounds), "final": kwargs.get("final")})
        step = self.script.pop(0)
        assert on_text is not None and self.clock is not None
        for word in step.text.split(" "):
            self.clock.now += self.cost
            on_text(word + " ")
        return step


def test_a_streamed_answer_that_outlives_the_deadline_is_cut_and_kept() -> None:
    # Given a model that keeps writing slowly (no read ever times out)
    clock = Clock()
    model = DrippingModel(ModelStep("one two three four five six"), clock=clock, cost=1.0)
    streamed: list[str] = []

    # When the turn has 3.5 seconds
    result = run(
        model, FakeToolbox(), clock=clock, deadline=clock.now + 3.5, on_text=streamed.append
    )

    # Then the stream is stopped at the deadline, and what was written is the answer
    assert result.stop_reason == "deadline"
    assert result.text == "one two three "
    assert "".join(streamed) == result.text
