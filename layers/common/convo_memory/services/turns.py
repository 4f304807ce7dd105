"""The serving path: one use case behind every door (``TurnService.serve``).

A turn reads the session state in one request, builds the prompt from the replay
window, asks the model, runs the content filter, and records the user message and the
answer exactly once, as one item (``TurnRecorder``). Nothing else is written per turn:
the head's activity mark moves at most once per granularity (before the model is
called, so that an archived or deleted session is refused before anything is paid), and
summary triggers carry no write at all (``SummaryTrigger``).

(v4) A turn offered the app's own tools may pause for them: it is then kept at its
position instead of recorded (one write), and the session's next request continues it
with the tools' results or, with a new user message, ends it as abandoned
(``services.paused_turns``). It is recorded once, when it ends.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    ResponseNotFound,
    SessionNotFound,
    ToolCallsMismatch,
    ValidationFailed,
)
from convo_memory.domain.models import (
    Capability,
    Message,
    Summary,
    ToolDigest,
    iso_at,
)
from convo_memory.domain.paused_turns import SEPARATOR, PendingTurn, app_tool_calls
from convo_memory.domain.prompt import DEFAULT_INSTRUCTIONS, ChatMessage, Prompt, build_prompt
from convo_memory.domain.prompt_record import PromptRecord, with_added
from convo_memory.domain.replay_window import ReplayWindow, keeps_start
from convo_memory.domain.responses import ResponseRef
from convo_memory.domain.sessions import context_of
from convo_memory.domain.time_budget import RECORDING_MARGIN_SECONDS
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.tools import ToolCall
from convo_memory.domain.turn_records import (
    MAX_INPUT_BYTES,
    TurnRecord,
    TurnState,
    fit_answer,
)
from convo_memory.domain.turns import (
    NewConversation,
    ReplayStats,
    SessionById,
    SessionByKey,
    SessionByResponse,
    ToolResults,
    TurnBegun,
    TurnCommand,
    TurnPosition,
    TurnResult,
    TurnSink,
    UserText,
)
from convo_memory.ports import SessionStore, TurnStore
from convo_memory.services.agent_loop import LoopStart
from convo_memory.services.answering import Answerer, AppTurn, ModelAnswer
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.conversations import ConversationService
from convo_memory.services.paused_turns import FirstCall, PausedTurns
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.session_keys import SessionKeys
from convo_memory.services.session_states import SessionStates
from convo_memory.services.summary_trigger import SummaryTrigger

logger = logging.getLogger(__name__)


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
    # (v4) A turn paused for the app's tools this long is ended as abandoned.
    pending_turn_seconds: float = 900
    # (v4) At most this many tool results continue a paused turn.
    max_tool_results: int = 128


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
    # Where it begins, in a session (a response id names it): set by ``begun``.
    begun_seq: int | None = None

    @property
    def user_input(self) -> str:
        """The user's message ("" for a turn that continues a paused one)."""
        given = self.command.input
        return given.text if isinstance(given, UserText) else ""

    @property
    def until(self) -> float:
        """When the turn's writes must end: its deadline, plus the time to record it."""
        return self.deadline + RECORDING_MARGIN_SECONDS

    def begun(self, session_id: str | None, user_seq: int | None = None) -> _Turn:
        """The turn, begun at ``user_seq`` of ``session_id``: a streaming door is told who
        it is, before the model is asked."""
        if self.sink is not None:
            self.sink.put(TurnBegun(self.reply_id, self.created, session_id, user_seq))
        return replace(self, begun_seq=user_seq)

    @property
    def instructions(self) -> str | None:
        """What its request added to the capability's instructions (the Responses door's
        ``instructions`` and system messages), for this turn alone."""
        settings = self.command.response
        return settings.instructions if settings is not None else None

    def kept(self, record: TurnRecord, sent: PromptRecord, answer: ModelAnswer) -> TurnRecord:
        """``record`` as this turn keeps it: its id, what its first model call was
        ``sent`` (with whether its Responses request named a ``previous_response_id``) and
        what that request set."""
        settings = self.command.response
        chained = settings is not None and settings.chained
        return replace(
            record,
            turn_id=self.reply_id,
            prompt_record=replace(sent, chained=chained),
            response=self.settings_kept(answer),
        )

    def settings_kept(self, answer: ModelAnswer) -> str | None:
        """What its Responses request set, as its turn keeps it (with ``cut`` when its
        answer stopped at the token limit)."""
        settings = self.command.response
        if settings is None:
            return None
        cut = answer.completion.finish == "length" and not answer.withheld
        return (replace(settings, cut=True) if cut else settings).encode()

    def result(
        self,
        answer: ModelAnswer,
        session_id: str | None = None,
        position: TurnPosition | None = None,
        recorded: bool = False,
        context: ReplayStats | None = None,
    ) -> TurnResult:
        completion, pause = answer.completion, answer.run.pause if answer.run else None
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
            # A withheld answer is the filter's, not the model's: it ended as the filter
            # chose (a paused one still waits for its calls).
            finish="stop" if answer.withheld and pause is None else completion.finish,
            usage=completion.usage,
            tool_calls=app_tool_calls(pause.step, pause.app_call_ids) if pause else (),
            begun_seq=self.begun_seq,
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
        conversations: ConversationService,
        pauses: PausedTurns,
        states: SessionStates,
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
        self._conversations = conversations
        self._policy = policy
        self._clock = clock
        self._monotonic = monotonic
        # A turn paused for the app's tools, and the session state a turn reads.
        self._pauses = pauses
        self._states = states

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
            # The turn's id too: a response id names it (``domain.responses``).
            reply_id=secrets.token_hex(8),
            created=int(self._clock()),
        )
        # Before anything is looked up or opened: a refused first call on a key opens nothing.
        check_turn_input(self._policy, command)
        conversation = command.conversation
        if isinstance(conversation, SessionByKey):
            return self._keyed(turn, conversation)
        if conversation is None:
            return serve_stateless(self._catalog, self._answerer, turn)
        if isinstance(conversation, SessionByResponse):
            return self._after_response(turn, conversation)
        if isinstance(conversation, NewConversation):
            assert command.capability_id is not None  # the Responses door names its model
            opened = self._conversations.open(workspace_id, command.capability_id, conversation)
            conversation = SessionById(opened)
        capability, state = self._states.session_turn(
            turn.workspace_id,
            command.capability_id,
            conversation.session_id,
            conversation.owner,
            _continues(command),
        )
        return self._converse(turn, capability, state)

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
        history = partial(self._conversations.records, by_key.history)
        session_id = self._keys.resolve(
            workspace_id, capability_id, by_key.key, by_key.owner, history
        )
        for attempt in range(2):
            try:
                capability, state = self._states.session_turn(
                    workspace_id, capability_id, session_id, by_key.owner, _continues(turn.command)
                )
                return self._converse(turn, capability, state)
            except SessionNotFound:
                if attempt:
                    raise
                session_id = self._keys.reopen(
                    workspace_id, capability_id, by_key.key, by_key.owner, session_id, history
                )
        raise AssertionError("unreachable")

    def _after_response(self, turn: _Turn, after: SessionByResponse) -> TurnResult:
        """A turn after a stored response: in its session when it is the newest there (or
        the pause this turn continues), else in a fork opened at its answer; 404
        ``response_not_found`` for one not stored (any more) in this workspace."""
        ref, continues = after.ref, _continues(turn.command)
        try:
            capability, state = self._states.session_turn(
                turn.workspace_id,
                turn.command.capability_id,
                ref.session_id,
                after.owner,
                continues,
            )
        except SessionNotFound:
            raise no_response(ref) from None
        fork = self._conversations.after_response(turn.workspace_id, state, ref, continues)
        if fork is not None:
            capability, state = self._states.session_turn(
                turn.workspace_id, capability.id, fork, after.owner, continues
            )
        return self._converse(turn, capability, state)

    # -- the one serving path ---------------------------------------------------------

    def _converse(self, turn: _Turn, capability: Capability, state: TurnState) -> TurnResult:
        command = turn.command
        self._answerer.check(capability, command.options, command.app_tools)
        if isinstance(command.input, ToolResults):
            return self._continue(turn, capability, state, command.input)
        now = self._clock()
        self._states.mark_active(state, now)
        # A new user message first ends a turn still waiting for the app's tools.
        state = self._pauses.end_as_abandoned(turn.workspace_id, state, turn.until)
        session = state.session
        seen = context_of(state, capability.replay_policy, now)
        prompt = session_prompt(
            turn,
            capability,
            state,
            seen.messages,
            seen.summary,
            seen.tool_digests,
            seen.window,
            self._states.fence_nonce(session),
        )
        turn = turn.begun(session.id, session.message_count + 1)
        app = app_turn_of(command)
        answer = self._answerer.answer(
            turn.workspace_id,
            capability,
            session,
            prompt,
            turn.sink,
            deadline=turn.deadline,
            app=app,
        )
        # What it was sent, named, not copied: ``GET .../messages/{seq}/prompt``.
        recalled = bool(session.recall and session.recall.text)
        offered = tuple(t.name for t in app.tools.definitions) if app and app.tools else ()
        first = FirstCall.of(turn.user_input, seen, recalled, offered)
        window = seen.window
        stats = ReplayStats(
            replayed_messages=len(window.messages),
            replayed_chars=window.replayed_chars,
            omitted_messages=window.omitted_messages,
            summary_included=seen.summary is not None,
        )
        if answer.paused:
            return self._keep_pause(turn, state, answer, None, first, app or AppTurn(None), stats)
        record = turn_record(
            self._policy,
            turn.user_input,
            answer,
            answer.completion.tool_calls,
            self._clock(),
            turn.idempotency_record,
        )
        record = turn.kept(record, first.record, answer)
        return self._record(turn, capability, state, record, answer, stats)

    def _continue(
        self, turn: _Turn, capability: Capability, state: TurnState, results: ToolResults
    ) -> TurnResult:
        """A paused turn continued with the app's tool results (409 when they do not
        answer exactly the calls it waits for): what the model saw at the pause, its
        calls and the results, and on from there; recorded over the pause when it ends,
        or kept again when it pauses again."""
        self._states.refuse_archived(state)
        pending = self._pauses.waiting(turn.workspace_id, state, turn.until)
        answered = pending.answered(results.results)
        now = self._clock()
        self._states.mark_active(state, now)  # once the results are known to fit
        sent = self._pauses.sent_at_pause(state, capability, pending, now)
        prompt = session_prompt(
            turn,
            capability,
            state,
            sent.messages,
            sent.summary,
            sent.digests,
            None,
            self._states.fence_nonce(state.session),
            pending,
        )
        turn = turn.begun(state.session.id, pending.user_seq)
        app = self._pauses.continued(pending, answered, AppTurn(turn.command.app_tools))
        answer = self._answerer.answer(
            turn.workspace_id,
            capability,
            state.session,
            prompt,
            turn.sink,
            deadline=turn.deadline,
            app=app,
        )
        stats = ReplayStats(
            replayed_messages=len(sent.messages),
            replayed_chars=sum(len(m.content) for m in sent.messages),
            omitted_messages=sent.messages[0].seq - 1 if sent.messages else pending.user_seq - 1,
            summary_included=sent.summary is not None,
        )
        if answer.paused:
            return self._keep_pause(turn, state, answer, pending, None, app, stats)
        record = final_record(
            self._policy, pending, answer, app, self._clock(), turn.idempotency_record
        )
        record = turn.kept(record, pending.prompt_record, answer)
        at_pause = state.session.model_copy(update={"message_count": pending.user_seq - 1})
        return self._record(
            turn, capability, replace(state, session=at_pause), record, answer, stats
        )

    def _keep_pause(
        self,
        turn: _Turn,
        state: TurnState,
        answer: ModelAnswer,
        previous: PendingTurn | None,
        first: FirstCall | None,
        app: AppTurn,
        stats: ReplayStats,
    ) -> TurnResult:
        """Keep a turn that paused (at the next position, or over the pause it
        continued) and answer with its calls; 409 when that pause was ended meanwhile."""
        pending = self._pauses.pause(turn.reply_id, answer, previous, first, app)
        replaces = previous.pause_id if previous is not None else None
        kept = self._recorder.keep_pause(state.session, pending, replaces, until=turn.until)
        if kept is None:
            raise ToolCallsMismatch("another request continued or ended this paused turn first")
        return turn.result(answer, state.session.id, None, False, stats)

    def _record(
        self,
        turn: _Turn,
        capability: Capability,
        state: TurnState,
        record: TurnRecord,
        answer: ModelAnswer,
        stats: ReplayStats,
    ) -> TurnResult:
        """Record the turn (or hand it over), ask for a summary when one is due, answer."""
        session = state.session
        # The turn's time includes recording it (or handing it over) after its deadline.
        recorded = self._recorder.record(turn.workspace_id, session, record, until=turn.until)
        if recorded.superseded:
            raise ToolCallsMismatch("another request continued or ended this paused turn first")
        if recorded.recorded:
            self._trigger.after_turn(
                turn.workspace_id,
                state,
                capability.replay_policy,
                record.user_content,
                record.answer,
            )
        return turn.result(answer, session.id, recorded.position, recorded.recorded, stats)


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


def _continues(command: TurnCommand) -> bool:
    return isinstance(command.input, ToolResults)


def app_turn_of(command: TurnCommand) -> AppTurn | None:
    """What a new turn brings of the app's tools: the tools offered and the client's own
    tool exchange after its input (stateless, or a new conversation's: the loop goes on
    from it); None when neither."""
    if command.app_tools is None and not command.rounds:
        return None
    return AppTurn(command.app_tools, LoopStart(command.rounds))


def no_response(ref: ResponseRef) -> ResponseNotFound:
    """The refusal of a ``previous_response_id`` that names no stored response here."""
    return ResponseNotFound(f"response {ref.id!r} not found", param="previous_response_id")


def check_turn_input(policy: TurnPolicy, command: TurnCommand) -> None:
    """Refuse an input a turn cannot take: a user message (``check_input``), or tool
    results (1 to ``max_tool_results``, each within the input limit, 413; a stateless
    turn has no paused turn to continue, 422)."""
    given = command.input
    if isinstance(given, UserText):
        check_input(policy, given.text)
        return
    if command.conversation is None:
        raise ValidationFailed("tool results continue a paused turn of a session")
    if not given.results or len(given.results) > policy.max_tool_results:
        raise ValidationFailed(f"a continuation carries 1-{policy.max_tool_results} tool results")
    for result in given.results:
        if len(result.output) > policy.max_input_chars:
            raise PayloadTooLarge(
                f"the tool result for {result.call_id!r} is {len(result.output)} "
                f"characters; the limit is {policy.max_input_chars}"
            )


def check_input(policy: TurnPolicy, user_input: str) -> None:
    """Refuse an empty input (422) or one over the deployment's limit (413)."""
    if not user_input.strip():
        raise ValidationFailed(
            "input must not be empty", details=[{"loc": ["input"], "msg": "empty input"}]
        )
    if len(user_input) > policy.max_input_chars:
        raise PayloadTooLarge(
            f"input is {len(user_input)} characters; the limit is {policy.max_input_chars}"
        )
    if len(user_input.encode("utf-8")) > MAX_INPUT_BYTES:
        raise PayloadTooLarge(f"input is larger than {MAX_INPUT_BYTES} bytes of UTF-8")


def turn_record(
    policy: TurnPolicy,
    user_input: str,
    answer: ModelAnswer,
    calls: Sequence[ToolCall],
    now: float,
    idempotency_record: str | None,
    text: str | None = None,
    withheld: bool | None = None,
) -> TurnRecord:
    """The record of a turn that ends now: ``text`` its whole answer (``answer``'s
    output unless given), its digest built from ``calls``, ``idempotency_record`` the
    record of its request's Idempotency-Key (kept with the turn so that erasing the
    session removes it too)."""
    withheld = answer.withheld if withheld is None else withheld
    stored, truncated = fit_answer(
        answer.output if text is None else text, user_input, policy.max_stored_answer_chars
    )
    # A withheld answer keeps no digest: it could hold what the filter caught.
    digest_text = None
    if calls and not withheld:
        digest_text = build_tool_digest(calls, policy.digest_max_chars)
    return TurnRecord(
        turn_id=secrets.token_urlsafe(12),
        user_content=user_input,
        answer=stored,
        withheld=withheld,
        truncated=truncated,
        created_at=iso_at(now),
        digest_tools=tuple(c.name for c in calls) if digest_text else (),
        digest_text=digest_text,
        digest_expires_at=now + policy.digest_retention_seconds if digest_text else None,
        run_id=answer.run_id,
        idempotency_record=idempotency_record,
    )


def final_record(
    policy: TurnPolicy,
    pending: PendingTurn,
    answer: ModelAnswer,
    app: AppTurn,
    now: float,
    idempotency_record: str | None,
) -> TurnRecord:
    """The record of a paused turn that ends now: its user message, everything the
    model wrote in it, every tool call (the service's and the app's) in its digest;
    written over the pause."""
    calls = (*app.calls, *answer.completion.tool_calls)
    text = SEPARATOR.join(t for t in (*pending.texts, answer.output) if t)
    withheld = answer.withheld or pending.withheld
    record = turn_record(
        policy, pending.user_input, answer, calls, now, idempotency_record, text, withheld
    )
    return replace(record, prompt_record=pending.prompt_record, resolves=pending.pause_id)


def session_prompt(
    turn: _Turn,
    capability: Capability,
    state: TurnState,
    messages: tuple[Message, ...],
    summary: Summary | None,
    digests: Sequence[ToolDigest],
    window: ReplayWindow | None,
    nonce: str,
    paused: PendingTurn | None = None,
) -> Prompt:
    """The prompt of a turn in a session: the capability's instructions, the recall,
    the summary behind the window, the window with its digests, the input (the
    turn's, or the ``paused`` turn's it continues), fenced with the session's ``nonce``.
    ``window``: the replay rule's (whether the next turn keeps its start; None for a
    paused turn's)."""
    session, policy = state.session, capability.replay_policy
    text = turn.user_input if paused is None else paused.user_input
    reused = window is not None and keeps_start(
        state.recent, policy, session.message_count, window, text
    )
    prompt = build_prompt(
        instructions=with_added(capability.instructions or DEFAULT_INSTRUCTIONS, turn.instructions),
        summary=summary,
        digests=digests,
        replayed=messages,
        user_input=text,
        recall=session.recall.text if session.recall else None,
        nonce=nonce,
        replay_reused=reused,
    )
    return replace(prompt, options=turn.command.options)


def serve_stateless(catalog: CapabilityCatalog, answerer: Answerer, turn: _Turn) -> TurnResult:
    """A turn outside any session: the capability's instructions, then what the client
    sent (its history, its own tool exchange), as given; nothing is recorded."""
    command = turn.command
    assert command.capability_id is not None  # a stateless turn names its capability
    capability = catalog.get(turn.workspace_id, command.capability_id)
    if command.conversational_only and not capability.conversational:
        raise CapabilityNotConversational.of(capability.id)
    answerer.check(capability, command.options, command.app_tools)
    prompt = build_prompt(
        instructions=with_added(capability.instructions or DEFAULT_INSTRUCTIONS, turn.instructions),
        summary=None,
        digests=(),
        replayed=(),
        user_input=turn.user_input,
    )
    prompt = with_client_history(prompt, command.history)
    prompt = replace(prompt, options=command.options)
    turn = turn.begun(None)
    app = app_turn_of(command)
    answer = answerer.answer(
        turn.workspace_id, capability, None, prompt, turn.sink, deadline=turn.deadline, app=app
    )
    return turn.result(answer)
