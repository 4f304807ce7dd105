"""The part of a turn that is the same with or without a session: ask the model, run the
content filter, keep the agent's run trace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from convo_memory.domain.errors import StoreRejected, StoreUnavailable
from convo_memory.domain.models import Capability, Session, iso, utc_now
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.turn_records import scrub_text
from convo_memory.ports import Completion, ContentFilter, MetricsPort, ModelProvider, RunStore
from convo_memory.services.catalog import new_id

logger = logging.getLogger(__name__)

DeltaSink = Callable[[str], None]


@dataclass(frozen=True)
class Answer:
    """What the consumer receives (``output``), and what produced it."""

    completion: Completion
    output: str
    withheld: bool
    run_id: str | None


class Answerer:
    def __init__(
        self,
        provider_for: Callable[[Capability], ModelProvider],
        filter_for: Callable[[Capability], ContentFilter | None],
        runs: RunStore,
        metrics: MetricsPort,
    ) -> None:
        self._provider_for = provider_for
        self._filter_for = filter_for
        self._runs = runs
        self._metrics = metrics

    def answer(
        self,
        workspace_id: str,
        capability: Capability,
        session: Session | None,
        prompt: Prompt,
        sink: DeltaSink | None,
    ) -> Answer:
        started = iso(utc_now())
        completion = self._generate(capability, prompt, sink)
        output, withheld = self._filtered(capability, completion.text, sink)
        run_id = self._record_run(
            workspace_id, capability, session, prompt.user_input, completion, started, output
        )
        return Answer(completion, output, withheld, run_id)

    @staticmethod
    def _streams_directly(capability: Capability, sink: DeltaSink | None) -> bool:
        # With a content filter, nothing reaches the client before the filter has passed
        # the whole answer, so stream only when there is no filter (or no sink).
        return (
            sink is not None and capability.kind == "generative" and not capability.content_filter
        )

    def _generate(
        self, capability: Capability, prompt: Prompt, sink: DeltaSink | None
    ) -> Completion:
        provider = self._provider_for(capability)
        if not self._streams_directly(capability, sink):
            completion = provider.complete(prompt)
            return Completion(scrub_text(completion.text), completion.tool_calls)
        assert sink is not None
        parts: list[str] = []
        for delta in provider.stream(prompt):
            delta = scrub_text(delta)
            parts.append(delta)
            sink(delta)
        return Completion(text="".join(parts))

    def _filtered(
        self, capability: Capability, text: str, sink: DeltaSink | None
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
        workspace_id: str,
        capability: Capability,
        session: Session | None,
        user_input: str,
        completion: Completion,
        started: str,
        output: str,
    ) -> str | None:
        if capability.kind != "agent":
            return None
        run_id = new_id("run")
        run = {
            "runId": run_id,
            "workspaceId": workspace_id,
            "capabilityId": capability.id,
            "sessionId": session.id if session else None,
            "principal": session.principal if session else None,
            "input": user_input,
            "output": output,
            "steps": [
                {
                    "type": "tool_call",
                    "tool": call.name,
                    "input": dict(call.input),
                    "output": call.output,
                    "startedAt": call.started_at,
                    "durationMs": call.duration_ms,
                    "principal": session.principal if session else None,
                }
                for call in completion.tool_calls
            ],
            "startedAt": started,
            "finishedAt": iso(utc_now()),
        }
        try:
            self._runs.put_run(run)
        except (StoreUnavailable, StoreRejected):
            # The trace is best effort on the request path; the answer is already paid for.
            logger.exception("could not store agent run trace %s", run_id)
            self._metrics.count("RunTraceWriteFailed")
        return run_id
