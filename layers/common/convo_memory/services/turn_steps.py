"""The parts of a turn the serving path puts together (``services.turns``): the policy a
turn keeps to, the turn in flight (its command, deadline and ids), the checks of its
input, its prompt in a session, its record, and a stateless turn whole."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from convo_memory.domain.attachments import AttachmentInput
from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    ResponseNotFound,
    ValidationFailed,
)
from convo_memory.domain.models import (
    Capability,
    Message,
    Session,
    Summary,
    ToolDigest,
    iso_at,
)
from convo_memory.domain.paused_turns import SEPARATOR, PendingTurn, app_tool_calls
from convo_memory.domain.prompt import DEFAULT_INSTRUCTIONS, ChatMessage, Prompt, build_prompt
from convo_memory.domain.prompt_record import PromptRecord, with_added
from convo_memory.domain.replay_window import ReplayWindow, keeps_start
from convo_memory.domain.responses import ResponseRef
from convo_memory.domain.sessions import ContextPreview
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
    ReplayStats,
    ToolResults,
    TurnBegun,
    TurnCommand,
    TurnPosition,
    TurnResult,
    TurnSink,
    UserText,
)
from convo_memory.services.agent_loop import LoopStart
from convo_memory.services.answering import Answerer, AppTurn, ModelAnswer
from convo_memory.services.attachments import NO_FILES, AttachmentService, TurnFiles
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.paused_turns import SentAtPause


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

    def deadline(self, now: float, budget_seconds: float | None) -> float:
        """When a turn's model and tool calls must end (``now`` and the answer both
        ``monotonic`` times): the door's budget, else the deployment's."""
        budget = self.turn_deadline_seconds if budget_seconds is None else budget_seconds
        return now + max(0.0, budget)


@dataclass(frozen=True)
class TurnInFlight:
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
    # (v5) The id of the imported user message it is written over (its answer filled in).
    fills: str | None = None
    # (v5) It follows a named item or response: a retry's twin at its position answers it.
    yields_to_twin: bool = False
    # (v5) Its input's attachments: checked, then kept for its session.
    files: TurnFiles = NO_FILES

    @classmethod
    def start(
        cls,
        workspace_id: str,
        command: TurnCommand,
        sink: TurnSink | None,
        deadline: float,
        idempotency_record: str | None,
        now: float,
    ) -> TurnInFlight:
        """A turn of ``command`` starting ``now``: its events go to ``sink`` when the
        command streams; a new id, which a response id names (``domain.responses``)."""
        return cls(
            workspace_id,
            command,
            sink if command.stream else None,
            deadline,
            idempotency_record,
            reply_id=secrets.token_hex(8),
            created=int(now),
        )

    @property
    def user_input(self) -> str:
        """The user's message ("" for a turn that continues a paused one)."""
        given = self.command.input
        return given.text if isinstance(given, UserText) else ""

    def with_files(
        self, checked: Callable[[str, str | None, Sequence[AttachmentInput]], TurnFiles]
    ) -> TurnInFlight:
        """(v5) The turn with what its user message carries ``checked`` (before anything
        is opened or stored: 413/422/404 naming the part)."""
        given = self.command.input
        inputs = given.attachments if isinstance(given, UserText) else ()
        if not inputs:
            return self
        return replace(self, files=checked(self.workspace_id, self.command.capability_id, inputs))

    @property
    def until(self) -> float:
        """When the turn's writes must end: its deadline, plus the time to record it."""
        return self.deadline + RECORDING_MARGIN_SECONDS

    def begun(self, session_id: str | None, user_seq: int | None = None) -> TurnInFlight:
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
            resolves=self.fills or record.resolves,
            yields_to_twin=self.yields_to_twin and not self.fills and not record.resolves,
            # (v5) A continuation brings none: its pause's stay (``final_record``).
            attachments=self.files.refs or record.attachments,
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


def kept_files(
    turn: TurnInFlight, attachments: AttachmentService, capability: Capability, session: Session
) -> TurnInFlight:
    """(v5) The turn with its attachments checked against its capability and stored for
    its session (their references go into its record)."""
    files = attachments.for_capability(turn.files, capability)
    return replace(turn, files=attachments.kept(turn.workspace_id, files, session))


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


def continues_a_pause(command: TurnCommand) -> bool:
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
        check_input(policy, given.text, bool(given.attachments))
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


def check_input(policy: TurnPolicy, user_input: str, attached: bool = False) -> None:
    """Refuse an empty input (422; (v5) one that carries attachments may have no text)
    or one over the deployment's limit (413)."""
    if not user_input.strip() and not attached:
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
    return replace(
        record,
        prompt_record=pending.prompt_record,
        resolves=pending.pause_id,
        attachments=pending.attachments,
    )


def session_prompt(
    turn: TurnInFlight,
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
        attachments=turn.files.refs if paused is None else paused.attachments,
    )
    return replace(prompt, options=turn.command.options)


def window_prompt(
    turn: TurnInFlight, capability: Capability, state: TurnState, seen: ContextPreview, nonce: str
) -> Prompt:
    """The prompt of a new message in a session, from what its turn sees (``seen``, as
    ``context_of`` finds it: the window, the summary behind it, the live digests), fenced
    with the session's ``nonce``."""
    return session_prompt(
        turn,
        capability,
        state,
        seen.messages,
        seen.summary,
        seen.tool_digests,
        seen.window,
        nonce,
    )


def serve_stateless(
    catalog: CapabilityCatalog,
    answerer: Answerer,
    turn: TurnInFlight,
    attachments: AttachmentService,
) -> TurnResult:
    """A turn outside any session: the capability's instructions, then what the client
    sent (its history, its own tool exchange), as given; nothing is recorded (its
    attachments pass to the model as given)."""
    command = turn.command
    assert command.capability_id is not None  # a stateless turn names its capability
    capability = catalog.get(turn.workspace_id, command.capability_id)
    if command.conversational_only and not capability.conversational:
        raise CapabilityNotConversational.of(capability.id)
    answerer.check(capability, command.options, command.app_tools)
    files = attachments.passed(attachments.for_capability(turn.files, capability))
    prompt = build_prompt(
        instructions=with_added(capability.instructions or DEFAULT_INSTRUCTIONS, turn.instructions),
        summary=None,
        digests=(),
        replayed=(),
        user_input=turn.user_input,
        attachments=files.refs,
    )
    prompt = with_client_history(prompt, command.history)
    prompt = attachments.attached(turn.workspace_id, capability, prompt, files)
    prompt = replace(prompt, options=command.options)
    turn = turn.begun(None)
    app = app_turn_of(command)
    answer = answerer.answer(
        turn.workspace_id, capability, None, prompt, turn.sink, deadline=turn.deadline, app=app
    )
    return turn.result(answer)


def replay_stats(seen: ContextPreview) -> ReplayStats:
    """What a new turn's window replayed and omitted (its answer's ``context``)."""
    window = seen.window
    return ReplayStats(
        replayed_messages=len(window.messages),
        replayed_chars=window.replayed_chars,
        omitted_messages=window.omitted_messages,
        summary_included=seen.summary is not None,
    )


def replay_stats_at_pause(sent: SentAtPause, pending: PendingTurn) -> ReplayStats:
    """What a continued turn's prompt replayed: what its pause was sent."""
    return ReplayStats(
        replayed_messages=len(sent.messages),
        replayed_chars=sum(len(m.content) for m in sent.messages),
        omitted_messages=sent.messages[0].seq - 1 if sent.messages else pending.user_seq - 1,
        summary_included=sent.summary is not None,
    )
