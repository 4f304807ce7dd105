"""The serving path: one use case behind every door (predict, stream, session messages).

A turn reads the session state in one request, builds the prompt from the replay
window, asks the model, runs the content filter, and records the user message and the
answer exactly once, as one item (``TurnRecorder``). Nothing else is written per turn:
the head's activity mark moves at most once per granularity (before the model is
called, so that an archived or deleted session is refused before anything is paid), and
summary triggers carry no write at all (``SummaryTrigger``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from convo_memory import request_scope
from convo_memory.api_models import Prediction, TurnContext
from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    StoreRejected,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.generation import NO_OPTIONS, FinishReason, GenerationOptions, TokenUsage
from convo_memory.domain.models import Capability, Session, iso_at, parse_iso
from convo_memory.domain.prompt import ChatMessage, Prompt, build_prompt, new_fence_nonce
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.replay_window import keeps_start, select_replay_window
from convo_memory.domain.summary_plan import summary_for_window
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.turn_records import (
    MAX_INPUT_BYTES,
    TurnRecord,
    TurnState,
    fit_answer,
    live_digests,
)
from convo_memory.ports import SessionStore, ToolEventSink, TurnStore
from convo_memory.services.answering import Answer, Answerer, DeltaSink
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.session_keys import SessionOwner
from convo_memory.services.summary_trigger import SummaryTrigger
from convo_memory.time_budget import RECORDING_MARGIN_SECONDS

logger = logging.getLogger(__name__)

MAX_REMEMBERED_SESSIONS = 10_000


@dataclass(frozen=True)
class TurnPolicy:
    max_input_chars: int = 32_000
    max_stored_answer_chars: int = 100_000
    digest_max_chars: int = 2_000
    digest_retention_seconds: float = 24 * 3600
    # The head's lastActiveAt (and the byActivity index) move at most this often.
    activity_granularity_seconds: float = 3600
    # An agent's tool loop ends this long after the turn started, leaving time to record
    # the turn before API Gateway stops waiting (30 s).
    turn_deadline_seconds: float = 25.0


@dataclass(frozen=True)
class TurnOutcome:
    """A served turn: its Prediction, and what the model call reported (tokens, and
    whether it stopped at its token limit) for doors that show it."""

    prediction: Prediction
    usage: TokenUsage | None = None
    finish: FinishReason = "stop"


@dataclass(frozen=True)
class ClientTurn:
    """What the OpenAI-compatible door adds to a turn: the client's generation options,
    who a keyed call says it is (``owner``, checked against the session), and for a
    stateless turn the conversation the client sent before its input (``history``;
    ``system`` messages follow the capability's instructions)."""

    options: GenerationOptions = NO_OPTIONS
    owner: SessionOwner | None = None
    history: Sequence[ChatMessage] = ()


class TurnService:
    def __init__(
        self,
        *,
        catalog: CapabilityCatalog,
        sessions: SessionStore,
        turns: TurnStore,
        answerer: Answerer,
        recorder: TurnRecorder,
        trigger: SummaryTrigger,
        policy: TurnPolicy,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._catalog = catalog
        self._sessions = sessions
        self._turns = turns
        self._answerer = answerer
        self._recorder = recorder
        self._trigger = trigger
        self._policy = policy
        self._clock = clock
        self._monotonic = monotonic
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
        if len(user_input.encode("utf-8")) > MAX_INPUT_BYTES:
            raise PayloadTooLarge(f"input is larger than {MAX_INPUT_BYTES} bytes of UTF-8")

    def predict(
        self,
        workspace_id: str,
        capability_id: str,
        user_input: str,
        session_id: str | None,
        sink: DeltaSink | None = None,
        on_tool: ToolEventSink | None = None,
        budget_seconds: float | None = None,
    ) -> Prediction:
        """``POST /v1/capabilities/{id}/predict`` (and its streaming twin). ``sink``
        receives the answer's text, ``on_tool`` each agent tool call's (name, status);
        ``budget_seconds`` (else the deployment's turn deadline) is the turn's time."""
        return self.turn(
            workspace_id, capability_id, user_input, session_id, sink, on_tool, budget_seconds
        ).prediction

    def turn(
        self,
        workspace_id: str,
        capability_id: str,
        user_input: str,
        session_id: str | None,
        sink: DeltaSink | None = None,
        on_tool: ToolEventSink | None = None,
        budget_seconds: float | None = None,
        client: ClientTurn | None = None,
    ) -> TurnOutcome:
        """``predict``, with what the OpenAI-compatible door adds (``client``) and what
        the model call reported."""
        client = client or ClientTurn()
        deadline = self._deadline(budget_seconds)
        self.check_input(user_input)
        capability = self._catalog.get(workspace_id, capability_id)
        if session_id is None:
            return self._stateless(
                workspace_id, capability, user_input, sink, on_tool, deadline, client
            )
        if not capability.conversational:
            raise CapabilityNotConversational(
                f"capability {capability.id!r} is a classic ML capability and takes no session"
            )
        state = self._load(workspace_id, session_id, capability)
        if state.session.capability_id != capability.id:
            raise SessionCapabilityMismatch(
                f"session {session_id!r} belongs to capability {state.session.capability_id!r}"
            )
        if client.owner is not None:
            client.owner.check(state.session)
        return self._converse(
            workspace_id, capability, state, user_input, sink, on_tool, deadline, client.options
        )

    def session_message(
        self,
        workspace_id: str,
        session_id: str,
        user_input: str,
        sink: DeltaSink | None = None,
        on_tool: ToolEventSink | None = None,
        budget_seconds: float | None = None,
    ) -> Prediction:
        """``POST /v1/sessions/{id}/messages``: a turn on the session's own capability."""
        deadline = self._deadline(budget_seconds)
        self.check_input(user_input)
        capability_id = self._session_capability.get((workspace_id, session_id))
        if capability_id is None:
            session = self._sessions.get_session(session_id)
            if session is None or session.workspace_id != workspace_id:
                raise SessionNotFound(f"session {session_id!r} not found")
            capability_id = session.capability_id
        capability = self._catalog.get(workspace_id, capability_id)
        state = self._load(workspace_id, session_id, capability)
        return self._converse(
            workspace_id, capability, state, user_input, sink, on_tool, deadline
        ).prediction

    def _deadline(self, budget_seconds: float | None) -> float:
        """When this turn's model and tool calls must end (a ``monotonic`` time): the
        door's budget, else the deployment's, always leaving time to record the turn."""
        budget = self._policy.turn_deadline_seconds if budget_seconds is None else budget_seconds
        return self._monotonic() + max(0.0, budget)

    # -- the one serving path ---------------------------------------------------
    def _load(self, workspace_id: str, session_id: str, capability: Capability) -> TurnState:
        state = self._turns.load_turn_state(
            session_id,
            capability.replay_policy.max_messages,
            with_digests=capability.kind == "agent",
        )
        if state is None or state.session.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        if len(self._session_capability) > MAX_REMEMBERED_SESSIONS:
            self._session_capability.clear()
        self._session_capability[(workspace_id, session_id)] = state.session.capability_id
        return state

    def _mark_active(self, state: TurnState, now: float) -> None:
        """Refuse a turn on an archived session; move the head's coarse activity mark
        when it is older than the granularity. The mark's write is conditional on the
        session being active, so it serializes with archiving and deletion."""
        session = state.session
        if session.status != "active":
            raise SessionArchived("the session is archived and accepts no new turns")
        mark = parse_iso(state.activity_mark) if state.activity_mark else 0.0
        if now - mark >= self._policy.activity_granularity_seconds:
            self._sessions.touch(session.id, iso_at(now))

    def _converse(
        self,
        workspace_id: str,
        capability: Capability,
        state: TurnState,
        user_input: str,
        sink: DeltaSink | None,
        on_tool: ToolEventSink | None,
        deadline: float,
        options: GenerationOptions = NO_OPTIONS,
    ) -> TurnOutcome:
        session: Session = state.session
        now = self._clock()
        self._mark_active(state, now)
        policy = capability.replay_policy
        window = select_replay_window(state.recent, policy, session.message_count)
        summary = summary_for_window(
            state.summary_versions, window.omitted_messages, policy.alignment
        )
        digests = live_digests(state, window.messages, now)
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=summary,
            digests=digests,
            replayed=window.messages,
            user_input=user_input,
            recall=session.recall.text if session.recall else None,
            nonce=self._fence_nonce(session),
            replay_reused=keeps_start(
                state.recent, policy, session.message_count, window, user_input
            ),
        )
        prompt = replace(prompt, options=options)
        answer = self._answerer.answer(
            workspace_id, capability, session, prompt, sink, on_tool=on_tool, deadline=deadline
        )
        # What it was sent, named, not copied: ``GET .../messages/{seq}/prompt``.
        recalled = bool(session.recall and session.recall.text)
        sent = PromptRecord.of(window.messages, summary, digests, recall=recalled)
        turn = replace(self._turn_record(user_input, answer, self._clock()), prompt_record=sent)
        # The turn's time includes recording it (or handing it over) after its deadline.
        recorded = self._recorder.record(
            workspace_id, session, turn, until=deadline + RECORDING_MARGIN_SECONDS
        )
        if recorded.recorded:
            self._trigger.after_turn(workspace_id, state, policy, user_input, turn.answer)
        prediction = Prediction(
            output=answer.output,
            withheld=answer.withheld,
            session_id=session.id,
            turn=recorded.seqs,
            recorded=recorded.recorded,
            run_id=answer.run_id,
            context=TurnContext(
                replayed_messages=len(window.messages),
                replayed_chars=window.replayed_chars,
                omitted_messages=window.omitted_messages,
                summary_included=summary is not None,
            ),
        )
        return _outcome(prediction, answer)

    def _fence_nonce(self, session: Session) -> str:
        """The session's fence nonce. A session created before nonces were kept gets one
        stored on its first turn (the winner of racing turns is kept); if the head
        cannot take it (archived or deleted meanwhile, or the write failed), this turn
        uses a fresh one: only the prompt's reuse by a cache is lost, never the fence."""
        if session.fence_nonce:
            return session.fence_nonce
        try:
            kept = self._sessions.keep_fence_nonce(session.id, new_fence_nonce())
        except (StoreUnavailable, StoreRejected):
            logger.warning("could not keep a fence nonce for session %s", session.id)
            kept = None
        return kept or new_fence_nonce()

    def _turn_record(self, user_input: str, answer: Answer, now: float) -> TurnRecord:
        stored, truncated = fit_answer(
            answer.output, user_input, self._policy.max_stored_answer_chars
        )
        calls = answer.completion.tool_calls
        # A withheld answer keeps no digest: it could hold what the filter caught.
        digest_text = None
        if calls and not answer.withheld:
            digest_text = build_tool_digest(calls, self._policy.digest_max_chars)
        return TurnRecord(
            turn_id=secrets.token_urlsafe(12),
            user_content=user_input,
            answer=stored,
            withheld=answer.withheld,
            truncated=truncated,
            created_at=iso_at(now),
            digest_tools=tuple(c.name for c in calls) if digest_text else (),
            digest_text=digest_text,
            digest_expires_at=now + self._policy.digest_retention_seconds if digest_text else None,
            run_id=answer.run_id,
            # Kept with the turn so that erasing the session removes the record too.
            idempotency_record=request_scope.idempotency_record(),
        )

    def _stateless(
        self,
        workspace_id: str,
        capability: Capability,
        user_input: str,
        sink: DeltaSink | None,
        on_tool: ToolEventSink | None,
        deadline: float,
        client: ClientTurn,
    ) -> TurnOutcome:
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=None,
            digests=(),
            replayed=(),
            user_input=user_input,
        )
        prompt = with_client_history(prompt, client.history)
        prompt = replace(prompt, options=client.options)
        answer = self._answerer.answer(
            workspace_id, capability, None, prompt, sink, on_tool=on_tool, deadline=deadline
        )
        prediction = Prediction(
            output=answer.output,
            withheld=answer.withheld,
            session_id=None,
            turn=None,
            recorded=False,
            run_id=answer.run_id,
            context=None,
        )
        return _outcome(prediction, answer)


def with_client_history(prompt: Prompt, history: Sequence[ChatMessage]) -> Prompt:
    """A stateless prompt with the conversation a client sent before its input: its
    ``system`` messages after the capability's instructions, the others before the input."""
    if not history:
        return prompt
    system = [m.content for m in history if m.role == "system"]
    chat = tuple(m for m in history if m.role != "system")
    return replace(
        prompt,
        system="\n\n".join([prompt.system, *system]),
        messages=chat + prompt.messages,
    )


def _outcome(prediction: Prediction, answer: Answer) -> TurnOutcome:
    completion = answer.completion
    # A withheld answer is the filter's, not the model's: it ended as the filter chose.
    finish = "stop" if answer.withheld else completion.finish
    return TurnOutcome(prediction, completion.usage, finish)
