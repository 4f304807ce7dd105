"""The serving path: one use case behind every door (predict, stream, session messages).

A turn reads the session state in one request, builds the prompt from the replay
window, asks the model, runs the content filter, and records the user message and the
answer exactly once. A failed transcript write never fails the turn: the turn goes to a
durable repair queue instead and the answer is returned with ``recorded: false``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.models import (
    Capability,
    Message,
    Prediction,
    Session,
    TurnContext,
    TurnSeqs,
    iso,
    utc_now,
)
from convo_memory.domain.prompt import Prompt, build_prompt
from convo_memory.domain.replay_window import ReplayWindow, select_replay_window
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.turn_records import AppendResult, TurnRecord, TurnState
from convo_memory.ports import Completion, ContentFilter, ModelProvider
from convo_memory.services.catalog import CapabilityCatalog, new_id
from convo_memory.services.sessions import live_digests

logger = logging.getLogger(__name__)

DeltaSink = Callable[[str], None]


class TurnStore(Protocol):
    def load_turn_state(
        self, session_id: str, max_messages: int, with_digests: bool
    ) -> TurnState | None: ...
    def append_turn(
        self, session_id: str, expected_count: int, turn: TurnRecord
    ) -> AppendResult: ...
    def put_run(self, run: dict[str, Any]) -> None: ...
    def get_session(self, session_id: str) -> Session | None: ...


class QueuePort(Protocol):
    def send(self, body: dict[str, Any], delay_seconds: int = 0) -> None: ...


class MetricsPort(Protocol):
    def count(self, name: str, value: int = 1) -> None: ...


class NullMetrics:
    def count(self, name: str, value: int = 1) -> None:
        return None


@dataclass(frozen=True)
class TurnPolicy:
    max_input_chars: int = 32_000
    digest_max_chars: int = 2_000
    digest_retention_seconds: float = 24 * 3600
    summary_coalesce_seconds: float = 10
    summary_delay_seconds: int = 1


class TurnService:
    def __init__(
        self,
        store: TurnStore,
        catalog: CapabilityCatalog,
        provider_for: Callable[[Capability], ModelProvider],
        filter_for: Callable[[Capability], ContentFilter | None],
        summary_queue: QueuePort | None,
        repair_queue: QueuePort | None,
        policy: TurnPolicy,
        metrics: MetricsPort | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._provider_for = provider_for
        self._filter_for = filter_for
        self._summary_queue = summary_queue
        self._repair_queue = repair_queue
        self._policy = policy
        self._metrics = metrics or NullMetrics()
        self._clock = clock
        # A session's capability never changes, so this container may remember it:
        # the messages door then reads the session state in one request too.
        self._session_capability: dict[tuple[str, str], str] = {}

    # -- doors ------------------------------------------------------------------
    def check_input(self, user_input: str) -> None:
        if not user_input.strip():
            raise ValidationFailed(
                "input must not be empty", details=[{"loc": ["input"], "msg": "empty input"}]
            )
        if len(user_input) > self._policy.max_input_chars:
            raise PayloadTooLarge(
                f"input is {len(user_input)} characters; the limit is "
                f"{self._policy.max_input_chars}"
            )

    def predict(
        self,
        workspace_id: str,
        capability_id: str,
        user_input: str,
        session_id: str | None,
        sink: DeltaSink | None = None,
    ) -> Prediction:
        """``POST /v1/capabilities/{id}/predict`` (and its streaming twin)."""
        self.check_input(user_input)
        capability = self._catalog.get(workspace_id, capability_id)
        if session_id is None:
            return self._stateless(workspace_id, capability, user_input, sink)
        if not capability.conversational:
            raise CapabilityNotConversational(
                f"capability {capability.id!r} is a classic ML capability and takes no session"
            )
        state = self._load(workspace_id, session_id, capability)
        if state.session.capability_id != capability.id:
            raise SessionCapabilityMismatch(
                f"session {session_id!r} belongs to capability {state.session.capability_id!r}"
            )
        return self._converse(workspace_id, capability, state, user_input, sink)

    def session_message(
        self, workspace_id: str, session_id: str, user_input: str, sink: DeltaSink | None = None
    ) -> Prediction:
        """``POST /v1/sessions/{id}/messages``: a turn on the session's own capability."""
        self.check_input(user_input)
        capability_id = self._session_capability.get((workspace_id, session_id))
        if capability_id is None:
            capability_id = self._session_head(workspace_id, session_id).capability_id
        capability = self._catalog.get(workspace_id, capability_id)
        state = self._load(workspace_id, session_id, capability)
        return self._converse(workspace_id, capability, state, user_input, sink)

    # -- the one serving path ---------------------------------------------------
    def _session_head(self, workspace_id: str, session_id: str) -> Session:
        state = self._store.load_turn_state(session_id, 0, with_digests=False)
        if state is None or state.session.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        session: Session = state.session
        return session

    def _load(self, workspace_id: str, session_id: str, capability: Capability) -> TurnState:
        state = self._store.load_turn_state(
            session_id,
            capability.replay_policy.max_messages,
            with_digests=capability.kind == "agent",
        )
        if state is None or state.session.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        if len(self._session_capability) > 10_000:
            self._session_capability.clear()
        self._session_capability[(workspace_id, session_id)] = state.session.capability_id
        return state

    def _converse(
        self,
        workspace_id: str,
        capability: Capability,
        state: TurnState,
        user_input: str,
        sink: DeltaSink | None,
    ) -> Prediction:
        session: Session = state.session
        if session.status != "active":
            raise SessionArchived("the session is archived and accepts no new turns")
        policy = capability.replay_policy
        now = self._clock()
        window = select_replay_window(state.recent, policy, session.message_count)
        digests = live_digests(state, window.messages, now)
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=state.summary,
            digests=digests,
            replayed=window.messages,
            user_input=user_input,
        )
        completion, output, withheld, run_id = self._answer(
            workspace_id, capability, session, prompt, sink
        )
        digest_text = None
        if completion.tool_calls:
            digest_text = build_tool_digest(completion.tool_calls, self._policy.digest_max_chars)
        # After the model call: a slow model must not make the coalescing window look older.
        due_at = self._clock()
        summary_due = self._summary_due(state, window, policy, due_at, user_input, output)
        turn = TurnRecord(
            turn_id=uuid.uuid4().hex,
            user_content=user_input,
            answer=output,
            withheld=withheld,
            created_at=iso(utc_now()),
            digest_tools=tuple(c.name for c in completion.tool_calls),
            digest_text=digest_text,
            digest_expires_at=now + self._policy.digest_retention_seconds if digest_text else None,
            mark_summary_requested_at=due_at if summary_due else None,
            run_id=run_id,
        )
        seqs, recorded = self._record(workspace_id, session, turn)
        if summary_due and recorded:
            self._request_summary(workspace_id, session.id)
        return Prediction(
            output=output,
            withheld=withheld,
            session_id=session.id,
            turn=seqs,
            recorded=recorded,
            run_id=run_id,
            context=TurnContext(
                replayed_messages=len(window.messages),
                replayed_chars=window.replayed_chars,
                omitted_messages=window.omitted_messages,
                summary_included=state.summary is not None,
            ),
        )

    def _stateless(
        self, workspace_id: str, capability: Capability, user_input: str, sink: DeltaSink | None
    ) -> Prediction:
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=None,
            digests=(),
            replayed=(),
            user_input=user_input,
        )
        _, output, withheld, run_id = self._answer(workspace_id, capability, None, prompt, sink)
        return Prediction(
            output=output,
            withheld=withheld,
            session_id=None,
            turn=None,
            recorded=False,
            run_id=run_id,
            context=None,
        )

    def _answer(
        self,
        workspace_id: str,
        capability: Capability,
        session: Session | None,
        prompt: Prompt,
        sink: DeltaSink | None,
    ) -> tuple[Completion, str, bool, str | None]:
        """Ask the model, run the content filter, keep the agent's run trace: the part of
        a turn that is the same with or without a session."""
        started = iso(utc_now())
        completion = self._generate(capability, prompt, sink)
        output, withheld = self._filtered(capability, completion.text, sink)
        run_id = self._record_run(
            workspace_id, capability, session, prompt.user_input, completion, started, output
        )
        return completion, output, withheld, run_id

    def _generate(
        self, capability: Capability, prompt: Prompt, sink: DeltaSink | None
    ) -> Completion:
        provider = self._provider_for(capability)
        # With a content filter, nothing reaches the client before the filter has passed
        # the whole answer, so stream only when there is no filter (or no sink).
        if sink is None or capability.kind != "generative" or capability.content_filter:
            return provider.complete(prompt)
        parts: list[str] = []
        for delta in provider.stream(prompt):
            parts.append(delta)
            sink(delta)
        return Completion(text="".join(parts))

    def _filtered(
        self, capability: Capability, text: str, sink: DeltaSink | None
    ) -> tuple[str, bool]:
        content_filter = self._filter_for(capability)
        streamed_already = (
            sink is not None and capability.kind == "generative" and not capability.content_filter
        )
        if content_filter is None:
            if sink is not None and not streamed_already:
                sink(text)
            return text, False
        verdict = content_filter.check(text)
        assert capability.content_filter is not None
        if verdict.allowed:
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
            self._store.put_run(run)
        except StoreUnavailable:
            # The trace is best effort on the request path; the answer is already paid for.
            logger.exception("could not store agent run trace %s", run_id)
            self._metrics.count("RunTraceWriteFailed")
        return run_id

    def _record(
        self, workspace_id: str, session: Session, turn: TurnRecord
    ) -> tuple[TurnSeqs | None, bool]:
        try:
            result = self._store.append_turn(session.id, session.message_count, turn)
        except StoreUnavailable:
            logger.exception(
                "transcript write failed for session %s; queued for repair", session.id
            )
            self._metrics.count("TranscriptWriteFailed")
            self._queue_repair(workspace_id, session, turn)
            return None, False
        return TurnSeqs(user_seq=result.user_seq, assistant_seq=result.assistant_seq), True

    def _queue_repair(self, workspace_id: str, session: Session, turn: TurnRecord) -> None:
        if self._repair_queue is None:
            logger.error("no repair queue configured; turn %s is lost", turn.turn_id)
            self._metrics.count("TranscriptRepairEnqueueFailed")
            return
        body = {"workspaceId": workspace_id, "sessionId": session.id, "turn": _turn_to_dict(turn)}
        try:
            self._repair_queue.send(body)
        except Exception:
            logger.exception("could not enqueue transcript repair for turn %s", turn.turn_id)
            self._metrics.count("TranscriptRepairEnqueueFailed")

    def repair(self, body: dict[str, Any]) -> str:
        """Write a turn whose transcript write failed on the request path.

        Exactly once: the turn marker makes a second delivery (or a write that did land
        before its timeout) a no-op. Appends at the session's current end, so the
        transcript stays contiguous. Storage errors propagate so the queue retries."""
        workspace_id, session_id = str(body["workspaceId"]), str(body["sessionId"])
        turn = _turn_from_dict(body["turn"])
        session = self._store.get_session(session_id)
        if session is None or session.workspace_id != workspace_id:
            logger.warning("repair for a deleted session %s dropped", session_id)
            return "session_gone"
        try:
            result = self._store.append_turn(session_id, session.message_count, turn)
        except SessionNotFound:
            return "session_gone"
        except SessionArchived:
            logger.error(
                "turn %s could not be repaired: session %s archived", turn.turn_id, session_id
            )
            self._metrics.count("TranscriptRepairDroppedArchived")
            return "archived"
        if result.already_recorded:
            return "already_recorded"
        self._metrics.count("TranscriptRepaired")
        return "recorded"

    def _summary_due(
        self,
        state: TurnState,
        window: ReplayWindow,
        policy: Any,
        now: float,
        user_input: str,
        output: str,
    ) -> bool:
        """Whether the history after this turn omits messages the summary does not yet
        cover, and no summary run was requested within the coalescing window (the
        summarizer re-checks when it finishes, so a burst still ends fully folded)."""
        if self._summary_queue is None:
            return False
        count = state.session.message_count
        upcoming = [
            *state.recent,
            Message(seq=count + 1, role="user", content=user_input, created_at=""),
            Message(seq=count + 2, role="assistant", content=output, created_at=""),
        ]
        next_window = select_replay_window(upcoming, policy, count + 2)
        covered = state.summary.through_seq if state.summary else 0
        beyond = max(next_window.omitted_messages, window.omitted_messages) > covered
        recently = now - state.summary_requested_at < self._policy.summary_coalesce_seconds
        return beyond and not recently

    def _request_summary(self, workspace_id: str, session_id: str) -> None:
        assert self._summary_queue is not None
        try:
            self._summary_queue.send(
                {"workspaceId": workspace_id, "sessionId": session_id},
                delay_seconds=self._policy.summary_delay_seconds,
            )
        except Exception:
            # Distant memory can wait; the conversation must not.
            logger.exception("could not enqueue summary for session %s", session_id)
            self._metrics.count("SummaryEnqueueFailed")


def _turn_from_dict(data: dict[str, Any]) -> TurnRecord:
    return TurnRecord(
        turn_id=str(data["turnId"]),
        user_content=str(data["userContent"]),
        answer=str(data["answer"]),
        withheld=bool(data["withheld"]),
        created_at=str(data["createdAt"]),
        digest_tools=tuple(data.get("digestTools") or ()),
        digest_text=data.get("digestText"),
        digest_expires_at=data.get("digestExpiresAt"),
        run_id=data.get("runId"),
    )


def _turn_to_dict(turn: TurnRecord) -> dict[str, Any]:
    return {
        "turnId": turn.turn_id,
        "userContent": turn.user_content,
        "answer": turn.answer,
        "withheld": turn.withheld,
        "createdAt": turn.created_at,
        "digestTools": list(turn.digest_tools),
        "digestText": turn.digest_text,
        "digestExpiresAt": turn.digest_expires_at,
        "runId": turn.run_id,
    }
