"""The tool loop: one implementation for every provider type.

A turn of an agent asks the model (a ``ToolCallingModel``) for a step; when the step
asks for tools, the loop calls them through the capability's ``Toolbox`` (in order, each
with the session's principal), hands the results back, and asks again. It is bounded
twice:

- by ``maxToolSteps`` rounds of tool calls: once they are used up, the loop asks the
  model once more for the answer with no further tool calls (``stopReason`` ``step_bound``);
- by the turn's deadline: every model and tool call gets at most the time left, and
  when too little is left for another model call the loop ends with what it has (the
  text the model wrote so far, else a sentence saying so; ``stopReason`` ``deadline``).

A tool that fails or times out becomes an error result the model sees; the turn goes
on. Text the model writes in any step (some models say what they are about to do before
calling a tool) is part of the answer, streamed as it is written; the steps' texts are
joined by a blank line.

(v4) The app's own tools are offered beside the toolbox's (``AppTools``). A step that
calls one of them ends the run ``paused``: the service's tools called in the same step
run first, and the run hands back the step (``Pause``) and the rounds so far, to be kept
until the app's results come. A run may start from such a paused turn's rounds
(``LoopStart``); the rounds it already had count against ``maxToolSteps``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import ModelStep, TokenUsage
from convo_memory.domain.models import iso, utc_now
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.tools import (
    AUTO,
    AppTools,
    ToolCall,
    ToolCallContext,
    ToolChoice,
    ToolDefinition,
    ToolOutcome,
    ToolReply,
    ToolRequest,
    ToolRound,
)
from convo_memory.domain.turn_abandonment import check_not_abandoned
from convo_memory.domain.turn_records import scrub_text
from convo_memory.ports import TextSink, Toolbox, ToolCallingModel, ToolEventSink

logger = logging.getLogger(__name__)

STEP_SEPARATOR = "\n\n"
# Below this many seconds there is no point in starting a model call.
MIN_MODEL_CALL_SECONDS = 1.0
# What the model is shown of one tool result (the trace and digest keep less).
MODEL_RESULT_MAX_CHARS = 32_000
RESULT_TRUNCATION_MARK = " …[truncated]"


class OutOfTime(Exception):
    """Raised from a streaming callback to stop a model whose turn is out of time."""


def deadline_guard(sink: TextSink, deadline: float, monotonic: Callable[[], float]) -> TextSink:
    """``sink``, stopping the stream (``OutOfTime``) once ``deadline`` has passed: a model
    that keeps writing slowly never trips a per-read timeout."""

    def guarded(delta: str) -> None:
        if monotonic() >= deadline:
            raise OutOfTime
        check_not_abandoned()  # a turn given up stops streaming here
        sink(delta)

    return guarded


STOP_ANSWERED = "answered"
STOP_STEP_BOUND = "step_bound"
STOP_DEADLINE = "deadline"
STOP_PAUSED = "paused"


@dataclass(frozen=True)
class Pause:
    """The step that called the app's tools: its text, every request (their ids made
    unique within the turn), the replies to the service's requests, and which requests
    the app answers (``app_call_ids``)."""

    step: ToolRound
    app_call_ids: tuple[str, ...]


@dataclass(frozen=True)
class LoopStart:
    """Where a run starts: a new turn (nothing), or a paused turn's rounds (its last
    one answered by the app), model calls and tokens so far."""

    rounds: tuple[ToolRound, ...] = ()
    model_calls: int = 0
    usage: TokenUsage | None = None


NEW_TURN = LoopStart()


@dataclass(frozen=True)
class AgentRun:
    """What a turn's loop produced: the answer, every tool call that ran, how many model
    calls it took and why it stopped (``answered``, ``step_bound``, ``deadline`` or
    ``paused``). A paused run also hands back its rounds and the paused step."""

    text: str
    calls: tuple[ToolCall, ...]
    model_calls: int
    stop_reason: str
    # Every model call's tokens added up; None when the provider reported none.
    usage: TokenUsage | None = None
    rounds: tuple[ToolRound, ...] = ()
    pause: Pause | None = None
    # The answer stopped at the model's output token limit (its last call said "length").
    cut: bool = False


class _Answer:
    """The answer as it grows over the steps; with a sink, every piece is streamed."""

    def __init__(self, sink: TextSink | None) -> None:
        self._sink = sink
        self._parts: list[str] = []
        self._step: list[str] = []

    def stream(self, delta: str) -> None:
        delta = scrub_text(delta)
        if not delta:
            return
        if not self._step and self._parts and self._sink is not None:
            self._sink(STEP_SEPARATOR)
        self._step.append(delta)
        if self._sink is not None:
            self._sink(delta)

    def end_step(self, step: ModelStep, streamed: bool) -> None:
        text = "".join(self._step) if streamed else scrub_text(step.text)
        self._step = []
        if text:
            self._parts.append(text)

    @property
    def streams(self) -> bool:
        return self._sink is not None

    def say(self, text: str) -> None:
        """Add text the loop itself writes (the deadline's closing sentence)."""
        self.stream(text)
        self.end_step(ModelStep(text), streamed=self._sink is not None)

    @property
    def text(self) -> str:
        return STEP_SEPARATOR.join(self._parts)


@dataclass
class _Run:
    """One run of the loop: what the model was asked and told so far, and what it cost.
    ``calls`` collects the tool calls as they run (the caller's list, when it gave one)."""

    model: ToolCallingModel
    prompt: Prompt
    definitions: tuple[ToolDefinition, ...]
    deadline: float
    answer: _Answer
    calls: list[ToolCall]
    rounds: list[ToolRound] = field(default_factory=list)
    model_calls: int = 0
    usage: TokenUsage | None = None
    # How the next model call may use the tools (the app's choice, for the first one).
    choice: ToolChoice = AUTO

    @classmethod
    def starting(
        cls,
        model: ToolCallingModel,
        prompt: Prompt,
        toolbox: Toolbox,
        deadline: float,
        answer: _Answer,
        calls: list[ToolCall] | None,
        app: AppTools | None,
        start: LoopStart,
    ) -> _Run:
        """A run offered the toolbox's tools and the app's, from ``start``."""
        definitions = toolbox.definitions + (app.offered if app is not None else ())
        run = cls(model, prompt, definitions, deadline, answer, calls if calls is not None else [])
        run.rounds, run.model_calls, run.usage = list(start.rounds), start.model_calls, start.usage
        if app is not None and app.choice.mode != "none":
            run.choice = app.choice
        return run

    def ended(self, stop: str) -> AgentRun:
        return AgentRun(self.answer.text, tuple(self.calls), self.model_calls, stop, self.usage)

    def paused(self, pause: Pause) -> AgentRun:
        return replace(self.ended(STOP_PAUSED), rounds=tuple(self.rounds), pause=pause)


class _NoTools:
    """The toolbox of a capability with no tools of its own (a generative one offered
    only the app's tools): whatever else the model calls is answered as unknown."""

    definitions: tuple[ToolDefinition, ...] = ()

    def call(
        self, name: str, tool_input: Mapping[str, Any], context: ToolCallContext, timeout: float
    ) -> ToolOutcome:
        return ToolOutcome("error", f"there is no tool named {name!r}")


NO_TOOLS: Toolbox = _NoTools()


class AgentLoop:
    def __init__(
        self,
        *,
        tool_timeout_seconds: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tool_timeout = tool_timeout_seconds
        self._monotonic = monotonic

    def run(
        self,
        model: ToolCallingModel,
        toolbox: Toolbox,
        prompt: Prompt,
        *,
        context: ToolCallContext,
        max_steps: int,
        deadline: float,
        on_text: TextSink | None = None,
        on_tool: ToolEventSink | None = None,
        calls: list[ToolCall] | None = None,
        app: AppTools | None = None,
        start: LoopStart = NEW_TURN,
    ) -> AgentRun:
        """Run the loop until the model answers, the step bound, the deadline, or (v4) a
        step that calls one of ``app``'s tools (the run is then ``paused``).

        ``deadline`` is a ``monotonic`` time; ``on_text`` receives the answer as it is
        written (only when it may reach the client unchecked); ``on_tool`` (name, status)
        once per finished tool call; ``calls``, if given, collects the calls as they run
        (so that a caller still knows them when a later model call fails); ``start`` the
        rounds of the paused turn this run continues."""
        run = _Run.starting(model, prompt, toolbox, deadline, _Answer(on_text), calls, app, start)
        app_names = app.names if app is not None else frozenset()
        stop = STOP_STEP_BOUND
        for _ in range(max(0, max(1, max_steps) - len(run.rounds))):
            step = self._ask(run, final=False)
            if step is None:
                stop = STOP_DEADLINE
                break
            if not step.requests:
                return replace(run.ended(STOP_ANSWERED), cut=step.finish == "length")
            requests = _unique_ids(step.requests, run.rounds)
            waiting = tuple(
                r.call_id for r in requests if r.name in app_names and r.input_error is None
            )
            replies = [
                self._call(toolbox, request, context, deadline, run.calls, on_tool)
                for request in requests
                if request.call_id not in waiting
            ]
            if waiting:
                return run.paused(Pause(ToolRound(step.text, requests, tuple(replies)), waiting))
            run.rounds.append(ToolRound(step.text, requests, tuple(replies)))
        else:
            if self._ask(run, final=True) is None:
                stop = STOP_DEADLINE
        if not run.answer.text:
            run.answer.say(_closing_sentence(stop, run.calls))
        return run.ended(stop)

    def _ask(self, run: _Run, final: bool) -> ModelStep | None:
        """One model call, given the run's rounds so far; None when the deadline leaves
        no time for it, or cut it off (what was written is kept)."""
        check_not_abandoned()  # a turn given up asks the model nothing more
        left = run.deadline - self._monotonic()
        if left < MIN_MODEL_CALL_SECONDS:
            return None
        run.model_calls += 1
        streaming = run.answer.streams
        try:
            step = run.model.step(
                run.prompt,
                tuple(run.rounds),
                run.definitions,
                timeout=left,
                final=final,
                on_text=(
                    deadline_guard(run.answer.stream, run.deadline, self._monotonic)
                    if streaming
                    else None
                ),
                choice=run.choice,
            )
            run.choice = run.choice.after_first_step()
        except OutOfTime:
            # Cut off mid-answer: keep what was written (and already streamed).
            run.answer.end_step(ModelStep(""), streamed=True)
            return None
        except ProviderError:
            # A call cut off by the deadline after tools ran: end with what we have.
            if run.rounds and self._monotonic() >= run.deadline - MIN_MODEL_CALL_SECONDS:
                return None
            raise
        run.answer.end_step(step, streamed=streaming)
        if step.usage is not None:
            run.usage = step.usage.plus(run.usage)
        return step

    def _call(
        self,
        toolbox: Toolbox,
        request: ToolRequest,
        context: ToolCallContext,
        deadline: float,
        calls: list[ToolCall],
        on_tool: ToolEventSink | None,
    ) -> ToolReply:
        check_not_abandoned()  # a turn given up calls no more tools
        started_at = iso(utc_now())
        began = self._monotonic()
        left = deadline - began
        # Arguments come from a model: make every string encodable before it is sent.
        tool_input = _scrubbed(dict(request.input))
        if request.input_error is not None:
            outcome = ToolOutcome("error", f"the tool was not called: {request.input_error}")
        elif left <= 0:
            outcome = ToolOutcome("timeout", "the turn's deadline passed before the call")
        else:
            try:
                outcome = toolbox.call(
                    request.name, tool_input, context, min(self._tool_timeout, left)
                )
            except Exception:
                # A toolbox never raises by contract; if one does, it is still a tool error.
                logger.exception("tool %s failed unexpectedly", request.name)
                outcome = ToolOutcome("error", "the tool call failed unexpectedly")
        output = scrub_text(outcome.output)
        calls.append(
            ToolCall(
                name=request.name,
                input=tool_input,
                output=output,
                started_at=started_at,
                duration_ms=round((self._monotonic() - began) * 1000, 3),
                status=outcome.status,
                principal=context.principal,
            )
        )
        if on_tool is not None:
            on_tool(request.name, outcome.status)
        shown = truncate(output, MODEL_RESULT_MAX_CHARS)
        if outcome.status != "ok":
            shown = f"[{outcome.status}] {shown}"
        return ToolReply(request.call_id, request.name, shown, is_error=outcome.status != "ok")


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, marked when cut."""
    if len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - len(RESULT_TRUNCATION_MARK))] + RESULT_TRUNCATION_MARK


def _scrubbed(value: Any) -> Any:
    """``value`` (decoded JSON) with every string passed through ``scrub_text``."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, Mapping):
        return {scrub_text(str(k)): _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v) for v in value]
    return value


def _unique_ids(
    requests: Sequence[ToolRequest], rounds: Sequence[ToolRound]
) -> tuple[ToolRequest, ...]:
    """``requests`` with ids unique within the turn: an app keys its results by them,
    so a missing or repeated id (a model that numbers each step's calls from 1) gets a
    fresh one, which the model then sees too."""
    seen = {request.call_id for round_ in rounds for request in round_.requests}
    unique: list[ToolRequest] = []
    for request in requests:
        if not request.call_id or request.call_id in seen:
            request = replace(request, call_id="call_" + secrets.token_hex(8))
        seen.add(request.call_id)
        unique.append(request)
    return tuple(unique)


def _closing_sentence(stop: str, calls: list[ToolCall]) -> str:
    limit = "time" if stop == STOP_DEADLINE else "tool steps"
    sentence = f"I ran out of {limit} before I could finish my answer."
    if calls:
        used = ", ".join(f"{call.name} ({call.status})" for call in calls)
        sentence += f" Tools called: {used}."
    return sentence
