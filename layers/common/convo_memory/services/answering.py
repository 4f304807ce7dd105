"""The part of a turn that is the same with or without a session: ask the model (for
an agent, or a turn offered the app's own tools, through the tool loop), run the content
filter, keep the run trace.

(v4) A turn offered the app's tools (``AppTurn``) runs the tool loop whatever its kind
(a generative capability with no tools of its own); when a step calls one of them the
answer is *paused* (``ModelAnswer.run.pause``): the calls go to the door's events
(``AppToolCalls``) and the serving path keeps the turn until the app's results come. A
run trace is stored for every agent turn, and for a turn that paused: at a pause only
when the service's tools have run (the audit record of those calls), else when the turn
ends, so a pause costs no trace write of its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from convo_memory.domain.errors import (
    ProviderError,
    StoreRejected,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.generation import Completion, FinishReason
from convo_memory.domain.ids import new_id
from convo_memory.domain.models import Capability, Session, iso, utc_now
from convo_memory.domain.paused_turns import app_tool_calls
from convo_memory.domain.prompt import Prompt, branch_of, estimated_usage, lineage_of
from convo_memory.domain.tools import AppTools, ToolCall, ToolCallContext
from convo_memory.domain.turn_abandonment import before_writing, check_not_abandoned
from convo_memory.domain.turn_records import scrub_text
from convo_memory.domain.turns import AnswerDelta, AppToolCalls, ToolFinished, TurnSink
from convo_memory.ports import (
    ContentFilter,
    MetricsPort,
    ModelProvider,
    RunStore,
    TextSink,
    Toolbox,
    ToolCallingModel,
    ToolEventSink,
)
from convo_memory.services.agent_loop import (
    MIN_MODEL_CALL_SECONDS,
    NEW_TURN,
    NO_TOOLS,
    STOP_PAUSED,
    AgentLoop,
    AgentRun,
    LoopStart,
    OutOfTime,
    deadline_guard,
    truncate,
)

logger = logging.getLogger(__name__)

# What a run trace keeps of each tool result.
TRACE_OUTPUT_MAX_CHARS = 4_000
DEFAULT_TURN_SECONDS = 25.0
# What an answer cut short by the turn's time budget ends with (or is, when empty).
CUT_OFF_MARK = " …[cut off: this turn ran out of time]"
NO_ANSWER_IN_TIME = "[no answer: the model did not answer within this turn's time budget]"


@dataclass(frozen=True)
class AppTurn:
    """(v4) What a turn brings of the app's own tools: the tools offered (None: none,
    in a continuation whose request did not resend them), and, when it continues a
    paused turn, where the tool loop starts, the turn's run and its calls so far (the
    service's and the app's answered ones)."""

    tools: AppTools | None
    start: LoopStart = NEW_TURN
    run_id: str | None = None
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ModelAnswer:
    """What the consumer receives (``output``), and what produced it: ``run_id`` names
    the run trace stored for it (None: none), ``run`` the tool loop's outcome (a paused
    turn's ``run.pause`` says what the app is asked for)."""

    completion: Completion
    output: str
    withheld: bool
    run_id: str | None
    run: AgentRun | None = None
    # The run the turn's trace has (or will have, once a paused turn ends).
    turn_run_id: str | None = None

    @property
    def paused(self) -> bool:
        return self.run is not None and self.run.pause is not None


class Answerer:
    def __init__(
        self,
        provider_for: Callable[[Capability], ModelProvider],
        filter_for: Callable[[Capability], ContentFilter | None],
        runs: RunStore,
        metrics: MetricsPort,
        *,
        loop: AgentLoop,
        toolbox_for: Callable[[Capability], Toolbox] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider_for = provider_for
        self._filter_for = filter_for
        self._runs = runs
        self._metrics = metrics
        self._toolbox_for = toolbox_for
        self._loop = loop
        self._monotonic = monotonic

    def answer(
        self,
        workspace_id: str,
        capability: Capability,
        session: Session | None,
        prompt: Prompt,
        events: TurnSink | None = None,
        *,
        deadline: float | None = None,
        app: AppTurn | None = None,
    ) -> ModelAnswer:
        """Answer ``prompt``. ``events`` hears the answer's text (as it is written when
        no content filter stands in between), each agent tool call's end and, when the
        turn pauses, the app's calls; ``deadline`` (a ``monotonic`` time) bounds the
        model and the tool loop; ``app`` what the turn brings of the app's tools."""
        deadline = deadline if deadline is not None else self._monotonic() + DEFAULT_TURN_SECONDS
        if session is not None:
            # Every turn of the conversation: one prompt-cache routing key for them all.
            prompt = replace(prompt, lineage=lineage_of(session), branch=branch_of(session))
        if capability.kind != "agent" and app is None:
            sink = None if events is None else _Deltas(events)
            completion = with_usage(self._generate(capability, prompt, sink, deadline), prompt)
            output, withheld = self._filtered(capability, completion.text, sink)
            return ModelAnswer(completion, output, withheld, None)
        return self._with_tools(
            workspace_id, capability, session, prompt, events, deadline, app or AppTurn(None)
        )

    def _with_tools(
        self,
        workspace_id: str,
        capability: Capability,
        session: Session | None,
        prompt: Prompt,
        events: TurnSink | None,
        deadline: float,
        app: AppTurn,
    ) -> ModelAnswer:
        """An answer through the tool loop: an agent's turn, or one offered the app's
        tools (paused when the model calls one of them), its run trace kept."""
        started = iso(utc_now())
        sink = None if events is None else _Deltas(events)
        context = ToolCallContext(
            workspace_id=workspace_id,
            capability_id=capability.id,
            session_id=session.id if session else None,
            run_id=app.run_id or new_id("run"),
            # The session's principal, as stamped at its creation: never a request's.
            principal=session.principal if session else None,
        )
        calls: list[ToolCall] = []
        on_tool = None if events is None else _ToolEnds(events)
        try:
            run = self._agent(capability, prompt, sink, context, deadline, on_tool, calls, app)
            finish: FinishReason = "tool_calls" if run.pause is not None else "stop"
            finish = "length" if run.cut else finish
            completion = with_usage(Completion(run.text, run.calls, run.usage, finish), prompt)
            output, withheld = self._filtered(capability, completion.text, sink)
        except Exception:
            # The tools that did run stay on record, even when the turn fails.
            failed = AgentRun("", (*app.calls, *calls), 0, "failed")
            self._record_run(context, capability, prompt.user_input, failed, started, None)
            raise
        if run.pause is not None and events is not None:
            events.put(AppToolCalls(app_tool_calls(run.pause.step, run.pause.app_call_ids)))
        traced = stores_trace(capability, run, app)
        if traced:
            whole = replace(run, calls=(*app.calls, *run.calls))
            ended = None if run.pause is not None else output
            self._record_run(context, capability, prompt.user_input, whole, started, ended)
        run_id = context.run_id if traced else None
        return ModelAnswer(completion, output, withheld, run_id, run, context.run_id)

    def check(
        self, capability: Capability, prompt_options: Any, app_tools: AppTools | None
    ) -> None:
        """Refuse what this capability's model cannot be asked (422, before anything is
        stored or paid): structured output on a provider that does not take it, and
        app tools named like the capability's own."""
        if prompt_options.response_format is not None and not getattr(
            self._provider_for(capability), "takes_response_format", False
        ):
            named = prompt_options.response_format_field
            raise ValidationFailed(
                f"{named} is not supported by this capability's model connection "
                "(structured output reaches OpenAI-compatible and embedded connections only)",
                details=[{"loc": named.split("."), "msg": "not supported", "type": "value_error"}],
                param=named,
            )
        if app_tools is not None:
            clash = sorted(app_tools.names & {tool.name for tool in capability.tools})
            if clash:
                raise ValidationFailed(
                    f"tools: {', '.join(clash)} is also a tool of this agent capability; "
                    "give the app's tools other names",
                    details=[{"loc": ["tools"], "msg": "name clash", "type": "value_error"}],
                    param="tools",
                )

    def _agent(
        self,
        capability: Capability,
        prompt: Prompt,
        sink: TextSink | None,
        context: ToolCallContext,
        deadline: float,
        on_tool: ToolEventSink | None,
        calls: list[ToolCall],
        app: AppTurn,
    ) -> AgentRun:
        provider = self._provider_for(capability)
        if not isinstance(provider, ToolCallingModel) or self._toolbox_for is None:
            # A provider that cannot call tools answers as plain chat.
            completion = self._generate(capability, prompt, sink, deadline)
            return AgentRun(completion.text, completion.tool_calls, 1, "answered", completion.usage)
        toolbox = self._toolbox_for(capability) if capability.kind == "agent" else NO_TOOLS
        return self._loop.run(
            provider,
            toolbox,
            prompt,
            context=context,
            max_steps=capability.tool_step_limit,
            deadline=deadline,
            on_text=sink if self._streams_directly(capability, sink) else None,
            on_tool=on_tool,
            calls=calls,
            app=app.tools,
            start=app.start,
        )

    @staticmethod
    def _streams_directly(capability: Capability, sink: TextSink | None) -> bool:
        # With a content filter, nothing reaches the client before the filter has passed
        # the whole answer, so stream only when there is no filter (or no sink).
        return sink is not None and capability.conversational and not capability.content_filter

    def _generate(
        self,
        capability: Capability,
        prompt: Prompt,
        sink: TextSink | None,
        deadline: float,
    ) -> Completion:
        """The model's answer within the turn's time budget: every call gets at most the
        time left, and a streamed answer is stopped when the budget runs out. The turn
        then keeps what it has (marked as cut off, or a sentence saying no answer came in
        time) and is recorded like any other."""
        provider = self._provider_for(capability)
        forward = sink if self._streams_directly(capability, sink) else None
        if not isinstance(provider, ToolCallingModel):
            # Embedded and classic models answer at once: nothing to cut short.
            return answer_at_once(provider, prompt, forward)
        parts: list[str] = []

        def collect(delta: str) -> None:
            delta = scrub_text(delta)
            parts.append(delta)
            if forward is not None:
                forward(delta)

        left = deadline - self._monotonic()
        try:
            if left < MIN_MODEL_CALL_SECONDS:
                raise OutOfTime
            step = provider.step(
                prompt,
                (),
                (),
                timeout=left,
                on_text=(
                    deadline_guard(collect, deadline, self._monotonic)
                    if forward is not None
                    else None
                ),
            )
        except OutOfTime:
            return self._cut_off(capability, parts, forward)
        except ProviderError:
            if self._monotonic() < deadline - MIN_MODEL_CALL_SECONDS:
                raise
            return self._cut_off(capability, parts, forward)  # the budget's own timeout
        text = "".join(parts) if forward is not None else scrub_text(step.text)
        return Completion(text, usage=step.usage, finish=step.finish)

    def _cut_off(
        self, capability: Capability, parts: list[str], forward: TextSink | None
    ) -> Completion:
        """What a turn keeps of an answer its time budget cut short."""
        ending = CUT_OFF_MARK if parts else NO_ANSWER_IN_TIME
        if forward is not None:
            forward(ending)
        self._metrics.count(
            "TurnDeadlineReached", 1, kind=capability.kind, outcome="partial" if parts else "none"
        )
        logger.warning("the model was cut off by the turn's time budget")
        return Completion("".join(parts) + ending)

    def _filtered(
        self, capability: Capability, text: str, sink: TextSink | None
    ) -> tuple[str, bool]:
        content_filter = self._filter_for(capability)
        if content_filter is None or capability.content_filter is None:
            if sink is not None and not self._streams_directly(capability, sink):
                sink(text)
            return text, False
        if content_filter.check(text).allowed:
            output, withheld = text, False
        else:
            self._metrics.count("AnswersWithheld")
            output, withheld = capability.content_filter.withheld_message, True
        if sink is not None:
            sink(output)
        return output, withheld

    def _record_run(
        self,
        context: ToolCallContext,
        capability: Capability,
        user_input: str,
        run: AgentRun,
        started: str,
        output: str | None,
    ) -> None:
        """Store the run's trace: each tool call exactly as sent (tool, input, principal),
        what came back (truncated), its status and timing. Best effort: the answer is
        already paid for."""
        trace = run_trace(context, capability, user_input, run, started, output)
        before_writing()  # a turn given up writes no trace
        try:
            self._runs.put_run(trace)
        except (StoreUnavailable, StoreRejected):
            # The trace is best effort on the request path; the answer is already paid for.
            logger.exception("could not store agent run trace %s", context.run_id)
            self._metrics.count("RunTraceWriteFailed")


def stores_trace(capability: Capability, run: AgentRun, app: AppTurn) -> bool:
    """Whether this request stores the turn's run trace: every agent turn and every
    turn that paused, once it ends; at a pause, only once the service's tools ran."""
    if run.pause is not None:
        return any(call.kind == "service" for call in (*app.calls, *run.calls))
    return capability.kind == "agent" or app.run_id is not None


def answer_at_once(provider: ModelProvider, prompt: Prompt, forward: TextSink | None) -> Completion:
    """An answer made at once (embedded and classic models): whole, or its pieces to
    ``forward`` as they are made."""
    if forward is None:
        completion = provider.complete(prompt)
        return Completion(
            scrub_text(completion.text),
            completion.tool_calls,
            completion.usage,
            completion.finish,
        )
    parts: list[str] = []
    for delta in provider.stream(prompt):
        check_not_abandoned()  # a turn given up stops streaming here
        delta = scrub_text(delta)
        parts.append(delta)
        forward(delta)
    return Completion(text="".join(parts))


def run_trace(
    context: ToolCallContext,
    capability: Capability,
    user_input: str,
    run: AgentRun,
    started: str,
    output: str | None,
) -> dict[str, Any]:
    """A run's trace as it is stored (``GET /v1/runs/{runId}``)."""
    completed = run.stop_reason != "failed"
    return {
        "runId": context.run_id,
        "workspaceId": context.workspace_id,
        "capabilityId": capability.id,
        "sessionId": context.session_id,
        "principal": context.principal,
        "input": user_input,
        "output": output,
        "status": _run_status(run),
        "stopReason": run.stop_reason if completed else None,
        "modelCalls": run.model_calls if completed else None,
        "maxToolSteps": capability.tool_step_limit,
        "steps": [_trace_step(call) for call in run.calls],
        "startedAt": started,
        "finishedAt": iso(utc_now()),
    }


def _run_status(run: AgentRun) -> str:
    """``completed``, ``failed``, or (v4) ``paused`` while the app runs its tools."""
    if run.stop_reason == "failed":
        return "failed"
    return "paused" if run.stop_reason == STOP_PAUSED else "completed"


def _trace_step(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "tool_call",
        # (v4) "service": a tool the service called; "app": one of the app's own tools,
        # which the app ran (its principal is never sent to the app: null).
        "kind": call.kind,
        "name": call.name,
        "tool": call.name,
        "input": dict(call.input),
        "principal": call.principal,
        "output": truncate(call.output, TRACE_OUTPUT_MAX_CHARS),
        "status": call.status,
        "startedAt": call.started_at,
        "durationMs": call.duration_ms,
    }


def with_usage(completion: Completion, prompt: Prompt) -> Completion:
    """``completion`` with the tokens it used: as its model reported them, else estimated
    (about four characters a token), so that every answer can say (some clients fail
    without ``usage``)."""
    if completion.usage is not None:
        return completion
    return replace(completion, usage=estimated_usage(prompt, completion.text))


class _Deltas:
    """The answer's text, as it is written, to a door's events."""

    def __init__(self, events: TurnSink) -> None:
        self._events = events

    def __call__(self, text: str) -> None:
        self._events.put(AnswerDelta(text))


class _ToolEnds:
    """Each tool call's end (name, status), to a door's events."""

    def __init__(self, events: TurnSink) -> None:
        self._events = events

    def __call__(self, name: str, status: str) -> None:
        self._events.put(ToolFinished(name, status))
