"""The serving path: one use case behind every door (``TurnService.serve``).

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
from convo_memory.domain.models import Capability, Session, iso_at, parse_iso
from convo_memory.domain.prompt import ChatMessage, Prompt, build_prompt, new_fence_nonce
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.replay_window import keeps_start
from convo_memory.domain.sessions import ContextPreview, context_of
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.turn_records import (
    MAX_INPUT_BYTES,
    TurnRecord,
    TurnState,
    fit_answer,
)
from convo_memory.domain.turns import (
    ReplayStats,
    SessionByKey,
    SessionOwner,
    TurnBegun,
    TurnCommand,
    TurnPosition,
    TurnResult,
    TurnSink,
)
from convo_memory.ports import SessionStore, TurnStore
from convo_memory.services.answering import Answer, Answerer
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.session_keys import SessionKeys
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
class _Turn:
    """One turn being served: the command, where its events go, when its model and
    tool calls must end (a ``monotonic`` time), and what identifies it."""

    workspace_id: str
    command: TurnCommand
    sink: TurnSink | None
    deadline: float
    idempotency_record: str | None
    reply_id: str
    created: int

    @property
    def user_input(self) -> str:
        return self.command.input.text

    def begin(self, session_id: str | None) -> None:
        """Tell a streaming door who the turn is, before the model is asked."""
        if self.sink is not None:
            self.sink.put(TurnBegun(self.reply_id, self.created, session_id))

    def result(
        self,
        answer: Answer,
        session_id: str | None = None,
        position: TurnPosition | None = None,
        recorded: bool = False,
        context: ReplayStats | None = None,
    ) -> TurnResult:
        completion = answer.completion
        return TurnResult(
            reply_id=self.reply_id,
            created=self.created,
            output=answer.output,
            withheld=answer.withheld,
            session_id=session_id,
            turn=position,
            recorded=recorded,
            run_id=answer.run_id,
            context=context,
            # A withheld answer is the filter's, not the model's: it ended as the filter chose.
            finish="stop" if answer.withheld else completion.finish,
            usage=completion.usage,
        )


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
        keys: SessionKeys,
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
        self._keys = keys
        self._policy = policy
        self._clock = clock
        self._monotonic = monotonic
        # A session's capability never changes, so this container may remember it:
        # the messages door then reads the session state in one request too.
        self._session_capability: dict[tuple[str, str], str] = {}

    def serve(
        self,
        workspace_id: str,
        command: TurnCommand,
        sink: TurnSink | None = None,
        *,
        budget_seconds: float | None = None,
        idempotency_record: str | None = None,
    ) -> TurnResult:
        """One turn of ``command``'s conversation: stateless, a session's by id, or the
        session of an app's key (found, or opened now). ``sink`` hears the turn's events
        when the command streams; ``budget_seconds`` (else the deployment's turn
        deadline) is the turn's time; ``idempotency_record`` names the record of the
        request's Idempotency-Key, kept with the turn so that erasing the session
        removes it too."""
        turn = _Turn(
            workspace_id,
            command,
            sink if command.stream else None,
            self._deadline(budget_seconds),
            idempotency_record,
            reply_id=secrets.token_hex(12),
            created=int(self._clock()),
        )
        # Before anything is looked up or opened: a refused first call on a key opens nothing.
        self.check_input(turn.user_input)
        conversation = command.conversation
        if isinstance(conversation, SessionByKey):
            return self._keyed(turn, conversation)
        if conversation is None:
            return self._stateless(turn)
        capability, state = self._session_turn(turn, conversation.session_id, conversation.owner)
        return self._converse(turn, capability, state)

    def check_input(self, user_input: str) -> None:
        """Refuse an empty input (422) or one over the deployment's limit (413)."""
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

    def _deadline(self, budget_seconds: float | None) -> float:
        """When this turn's model and tool calls must end (a ``monotonic`` time): the
        door's budget, else the deployment's, always leaving time to record the turn."""
        budget = self._policy.turn_deadline_seconds if budget_seconds is None else budget_seconds
        return self._monotonic() + max(0.0, budget)

    # -- which session ----------------------------------------------------------------

    def _keyed(self, turn: _Turn, by_key: SessionByKey) -> TurnResult:
        """A turn of the session of an app's key. A key whose session was deleted
        meanwhile opens a new one (refused before the model was called: nothing was paid
        or recorded)."""
        workspace_id, capability_id = turn.workspace_id, turn.command.capability_id
        assert capability_id is not None  # a key belongs to a capability
        session_id = self._keys.resolve(workspace_id, capability_id, by_key.key, by_key.owner)
        for attempt in range(2):
            try:
                capability, state = self._session_turn(turn, session_id, by_key.owner)
                return self._converse(turn, capability, state)
            except SessionNotFound:
                if attempt:
                    raise
                session_id = self._keys.reopen(
                    workspace_id, capability_id, by_key.key, by_key.owner, session_id
                )
        raise AssertionError("unreachable")

    def _session_turn(
        self, turn: _Turn, session_id: str, owner: SessionOwner | None = None
    ) -> tuple[Capability, TurnState]:
        """The capability and the session state a turn of ``session_id`` is served with,
        once the session may take it from this door (404, 409 otherwise)."""
        workspace_id, capability_id = turn.workspace_id, turn.command.capability_id
        if capability_id is None:  # the session's own capability
            capability = self._catalog.get(workspace_id, self._capability_of(turn, session_id))
        else:
            capability = self._catalog.get(workspace_id, capability_id)
            if not capability.conversational:
                raise CapabilityNotConversational.of(capability.id)
        state = self._load(workspace_id, session_id, capability)
        if state.session.capability_id != capability.id:
            raise SessionCapabilityMismatch(
                f"session {session_id!r} belongs to capability {state.session.capability_id!r}"
            )
        if owner is not None:
            owner.check(state.session)
        return capability, state

    def _capability_of(self, turn: _Turn, session_id: str) -> str:
        capability_id = self._session_capability.get((turn.workspace_id, session_id))
        if capability_id is None:
            session = self._sessions.get_session(session_id)
            if session is None or session.workspace_id != turn.workspace_id:
                raise SessionNotFound(f"session {session_id!r} not found")
            capability_id = session.capability_id
        return capability_id

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

    # -- the one serving path ---------------------------------------------------------

    def _converse(self, turn: _Turn, capability: Capability, state: TurnState) -> TurnResult:
        session = state.session
        now = self._clock()
        self._mark_active(state, now)
        policy = capability.replay_policy
        seen = context_of(state, policy, now)
        prompt = self._session_prompt(turn, capability, state, seen)
        turn.begin(session.id)
        answer = self._answerer.answer(
            turn.workspace_id, capability, session, prompt, turn.sink, deadline=turn.deadline
        )
        # What it was sent, named, not copied: ``GET .../messages/{seq}/prompt``.
        recalled = bool(session.recall and session.recall.text)
        sent = PromptRecord.of(
            seen.window.messages, seen.summary, seen.tool_digests, recall=recalled
        )
        record = replace(self._turn_record(turn, answer, self._clock()), prompt_record=sent)
        # The turn's time includes recording it (or handing it over) after its deadline.
        recorded = self._recorder.record(
            turn.workspace_id, session, record, until=turn.deadline + RECORDING_MARGIN_SECONDS
        )
        if recorded.recorded:
            self._trigger.after_turn(
                turn.workspace_id, state, policy, turn.user_input, record.answer
            )
        window = seen.window
        stats = ReplayStats(
            replayed_messages=len(window.messages),
            replayed_chars=window.replayed_chars,
            omitted_messages=window.omitted_messages,
            summary_included=seen.summary is not None,
        )
        return turn.result(answer, session.id, recorded.position, recorded.recorded, stats)

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

    def _session_prompt(
        self, turn: _Turn, capability: Capability, state: TurnState, seen: ContextPreview
    ) -> Prompt:
        """The prompt of a turn in a session: the capability's instructions, the recall,
        the summary behind the window, the window with its digests, the input."""
        session, policy, window = state.session, capability.replay_policy, seen.window
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=seen.summary,
            digests=seen.tool_digests,
            replayed=window.messages,
            user_input=turn.user_input,
            recall=seen.recall.text if seen.recall else None,
            nonce=self._fence_nonce(session),
            replay_reused=keeps_start(
                state.recent, policy, session.message_count, window, turn.user_input
            ),
        )
        return replace(prompt, options=turn.command.options)

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

    def _turn_record(self, turn: _Turn, answer: Answer, now: float) -> TurnRecord:
        stored, truncated = fit_answer(
            answer.output, turn.user_input, self._policy.max_stored_answer_chars
        )
        calls = answer.completion.tool_calls
        # A withheld answer keeps no digest: it could hold what the filter caught.
        digest_text = None
        if calls and not answer.withheld:
            digest_text = build_tool_digest(calls, self._policy.digest_max_chars)
        return TurnRecord(
            turn_id=secrets.token_urlsafe(12),
            user_content=turn.user_input,
            answer=stored,
            withheld=answer.withheld,
            truncated=truncated,
            created_at=iso_at(now),
            digest_tools=tuple(c.name for c in calls) if digest_text else (),
            digest_text=digest_text,
            digest_expires_at=now + self._policy.digest_retention_seconds if digest_text else None,
            run_id=answer.run_id,
            # Kept with the turn so that erasing the session removes the record too.
            idempotency_record=turn.idempotency_record,
        )

    def _stateless(self, turn: _Turn) -> TurnResult:
        capability_id = turn.command.capability_id
        assert capability_id is not None  # a stateless turn names its capability
        capability = self._catalog.get(turn.workspace_id, capability_id)
        if turn.command.conversational_only and not capability.conversational:
            raise CapabilityNotConversational.of(capability.id)
        prompt = build_prompt(
            instructions=capability.instructions,
            summary=None,
            digests=(),
            replayed=(),
            user_input=turn.user_input,
        )
        prompt = with_client_history(prompt, turn.command.history)
        prompt = replace(prompt, options=turn.command.options)
        turn.begin(None)
        answer = self._answerer.answer(
            turn.workspace_id, capability, None, prompt, turn.sink, deadline=turn.deadline
        )
        return turn.result(answer)


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
