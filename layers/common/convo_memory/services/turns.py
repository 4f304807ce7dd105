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

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from convo_memory.domain.app_call_ids import provider_outputs
from convo_memory.domain.errors import (
    CapabilityNotConversational,
    SessionNotFound,
    ToolCallsMismatch,
)
from convo_memory.domain.models import (
    Capability,
    Session,
)
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.sessions import context_of
from convo_memory.domain.turn_abandonment import TurnAbandoned, sessions_opened
from convo_memory.domain.turn_records import (
    TurnState,
)
from convo_memory.domain.turns import (
    NewConversation,
    SessionById,
    SessionByItems,
    SessionByKey,
    SessionByResponse,
    ToolResults,
    TurnCommand,
    TurnResult,
    TurnSink,
)
from convo_memory.services.answering import Answerer, AppTurn, ModelAnswer
from convo_memory.services.attachments import AttachmentService
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.chained_turns import serve_unrecorded
from convo_memory.services.conversations import ConversationService
from convo_memory.services.paused_turns import FirstCall, PausedTurns
from convo_memory.services.session_keys import SessionKeys
from convo_memory.services.session_states import SessionStates
from convo_memory.services.turn_endings import TurnEndings
from convo_memory.services.turn_routing import Routed, TurnRouter
from convo_memory.services.turn_steps import (
    TurnInFlight,
    TurnPolicy,
    app_turn_of,
    check_turn_input,
    continues_a_pause,
    final_record,
    kept_files,
    replay_stats,
    replay_stats_at_pause,
    serve_stateless,
    session_prompt,
    turn_record,
    window_prompt,
)

NO_PAUSE = "this conversation has no turn waiting for tool results"


class TurnService:
    def __init__(
        self,
        *,
        catalog: CapabilityCatalog,
        answerer: Answerer,
        endings: TurnEndings,
        keys: SessionKeys,
        conversations: ConversationService,
        pauses: PausedTurns,
        states: SessionStates,
        router: TurnRouter,
        policy: TurnPolicy,
        attachments: AttachmentService,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._catalog = catalog
        self._answerer = answerer
        # How a turn ends: recorded (or handed over), or kept paused for the app's tools.
        self._endings = endings
        self._keys = keys
        self._conversations = conversations
        self._policy = policy
        self._clock = clock
        self._monotonic = monotonic
        # A turn paused for the app's tools, and the session state a turn reads.
        self._pauses = pauses
        self._states = states
        # (v5) Where a turn after a response, or after the items it names, goes.
        self._router = router
        self._attachments = attachments  # (v5) a turn's images and documents

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
        deadline = self._policy.deadline(self._monotonic(), budget_seconds)
        now = self._clock()
        turn = TurnInFlight.start(workspace_id, command, sink, deadline, idempotency_record, now)
        with sessions_opened() as opened:
            try:
                result = self._serve(turn)
            except TurnAbandoned:
                self._conversations.forget(workspace_id, opened)  # a refused turn opens nothing
                raise
        if result.completed is not None:  # a turn answered again keeps its own
            return result
        return replace(result, completed=int(self._clock()))

    def _serve(self, turn: TurnInFlight) -> TurnResult:
        workspace_id, command = turn.workspace_id, turn.command
        # Before anything is looked up or opened: a refused first call on a key opens nothing.
        check_turn_input(self._policy, command)
        turn = turn.with_files(self._attachments.checked)
        conversation = command.conversation
        if conversation is None:
            return serve_stateless(
                self._catalog, self._answerer, self._router.read_history(turn), self._attachments
            )
        if command.capability_id is not None:
            # A refused request opens, binds or forks nothing: what the request alone
            # refuses comes before any conversation is found, opened or bound.
            self._check_before_opening(turn)
        if isinstance(conversation, SessionByKey):
            return self._keyed(turn, conversation)
        if isinstance(conversation, SessionByResponse):
            return self._routed(turn, self._router.after_response(turn, conversation))
        if isinstance(conversation, SessionByItems):
            return self._routed(turn, self._router.by_items(turn, conversation))
        if isinstance(conversation, NewConversation):
            self._conversations.check_references(workspace_id, command.references)
            assert command.capability_id is not None  # the Responses door names its model
            opened = self._conversations.open(workspace_id, command.capability_id, conversation)
            conversation = SessionById(opened)
        capability, state = self._states.session_turn(
            turn.workspace_id,
            command.capability_id,
            conversation.session_id,
            conversation.owner,
            continues_a_pause(command),
        )
        return self._converse(turn, capability, state)

    # -- which session ----------------------------------------------------------------

    def _keyed(self, turn: TurnInFlight, by_key: SessionByKey) -> TurnResult:
        """A turn of the session of an app's key. A key whose session was deleted
        meanwhile opens a new one (refused before the model was called: nothing was paid
        or recorded). A refused call opens nothing: tool results for a key without a
        session answer no pause (409), and what the request alone refuses (422) is
        refused before a session is opened."""
        workspace_id, capability_id = turn.workspace_id, turn.command.capability_id
        assert capability_id is not None  # a key belongs to a capability
        continues = continues_a_pause(turn.command)
        history = partial(self._conversations.records, by_key.history)
        key, owner = by_key.key, by_key.owner
        found = self._keys.resolve(
            workspace_id, capability_id, key, owner, history, opens=not continues
        )
        for attempt in range(2):
            if found is None:
                raise ToolCallsMismatch(NO_PAUSE)
            try:
                capability, state = self._states.session_turn(
                    workspace_id, capability_id, found, owner, continues
                )
                return self._converse(turn, capability, state)
            except SessionNotFound:
                if attempt:
                    raise
                found = self._keys.reopen(
                    workspace_id, capability_id, key, owner, found, history, opens=not continues
                )
        raise AssertionError("unreachable")

    def _check_before_opening(self, turn: TurnInFlight) -> None:
        """What the request alone refuses (an unknown or classic capability, options or
        tools its model cannot take), before a conversation is opened, bound (a
        conversation's first response binds it) or forked for it."""
        command = turn.command
        assert command.capability_id is not None
        capability = self._catalog.get(turn.workspace_id, command.capability_id)
        if not capability.conversational:
            raise CapabilityNotConversational.of(capability.id)
        self._answerer.check(capability, command.options, command.app_tools)
        self._attachments.for_capability(turn.files, capability)  # (v5) kinds it refuses

    def _routed(self, turn: TurnInFlight, routed: Routed) -> TurnResult:
        """A turn where the router placed it: in a session (or fork), answered again (a
        retry), or served as another command (a new conversation instead)."""
        if isinstance(routed, TurnResult):
            return routed
        if isinstance(routed, TurnCommand):
            return self._serve(replace(turn, command=routed))
        capability, state, fills = routed
        return self._converse(replace(turn, fills=fills, yields_to_twin=True), capability, state)

    # -- the one serving path ---------------------------------------------------------

    def _converse(self, turn: TurnInFlight, capability: Capability, state: TurnState) -> TurnResult:
        command = turn.command
        self._answerer.check(capability, command.options, command.app_tools)
        self._conversations.check_references(turn.workspace_id, command.references, state)
        if not command.record:
            return serve_unrecorded(
                self._answerer,
                self._states,
                turn,
                capability,
                state,
                self._clock(),
                self._attachments,
            )
        if isinstance(command.input, ToolResults):
            return self._continue(turn, capability, state, command.input)
        return self._new_message(turn, capability, state)

    def _new_message(
        self, turn: TurnInFlight, capability: Capability, state: TurnState
    ) -> TurnResult:
        """A turn of a new user message: the pause it ends, its attachments kept, the
        window and the prompt, the answer, then recorded or kept paused."""
        command = turn.command
        now = self._clock()
        self._states.mark_active(state, now)
        # A new user message first ends a turn still waiting for the app's tools.
        state = self._pauses.end_as_abandoned(turn.workspace_id, state, turn.until)
        session = state.session
        turn = kept_files(turn, self._attachments, capability, session)
        seen = context_of(state, capability.replay_policy, now)
        prompt = window_prompt(turn, capability, state, seen, self._states.fence_nonce(session))
        prompt = self._attachments.attached(turn.workspace_id, capability, prompt, turn.files)
        turn = turn.begun(session.id, session.message_count + 1)
        app = app_turn_of(command)
        answer = self._ask(turn, capability, session, prompt, app)
        # What it was sent, named, not copied: ``GET .../messages/{seq}/prompt``.
        recalled = bool(session.recall and session.recall.text)
        offered = tuple(t.name for t in app.tools.definitions) if app and app.tools else ()
        first = FirstCall.of(turn.user_input, seen, recalled, offered)
        stats = replay_stats(seen)
        if answer.paused:
            return self._endings.keep_pause(
                turn, state, answer, None, first, app or AppTurn(None), stats
            )
        record = turn_record(
            self._policy,
            turn.user_input,
            answer,
            answer.completion.tool_calls,
            self._clock(),
            turn.idempotency_record,
        )
        record = turn.kept(record, first.record, answer)
        return self._endings.record(turn, capability, state, record, answer, stats)

    def _continue(
        self, turn: TurnInFlight, capability: Capability, state: TurnState, results: ToolResults
    ) -> TurnResult:
        """A paused turn continued with the app's tool results (409 when they do not
        answer exactly the calls it waits for): what the model saw at the pause, its
        calls and the results, and on from there; recorded over the pause when it ends,
        or kept again when it pauses again."""
        self._states.refuse_archived(state)
        pending = self._pauses.waiting(turn.workspace_id, state, turn.until)
        answered = pending.answered(provider_outputs(state.session.id, pending, results.results))
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
        prompt = self._attachments.attached(turn.workspace_id, capability, prompt, turn.files)
        turn = turn.begun(state.session.id, pending.user_seq)
        app = self._pauses.continued(pending, answered, AppTurn(turn.command.app_tools))
        answer = self._ask(turn, capability, state.session, prompt, app)
        stats = replay_stats_at_pause(sent, pending)
        if answer.paused:
            return self._endings.keep_pause(turn, state, answer, pending, None, app, stats)
        record = final_record(
            self._policy, pending, answer, app, self._clock(), turn.idempotency_record
        )
        record = turn.kept(record, pending.prompt_record, answer)
        at_pause = state.session.model_copy(update={"message_count": pending.user_seq - 1})
        return self._endings.record(
            turn, capability, replace(state, session=at_pause), record, answer, stats
        )

    def _ask(
        self,
        turn: TurnInFlight,
        capability: Capability,
        session: Session,
        prompt: Prompt,
        app: AppTurn | None,
    ) -> ModelAnswer:
        """The model's answer to ``prompt`` (through the tool loop, the filter, the
        trace), within the turn's deadline, its events to the turn's sink."""
        sink, deadline = turn.sink, turn.deadline
        return self._answerer.answer(
            turn.workspace_id, capability, session, prompt, sink, deadline=deadline, app=app
        )
