"""A turn as every door hands it to the serving path and gets it back.

A door reads its request into a ``TurnCommand`` (what the request asks), the turn edge
serves it, and the door frames the ``TurnResult`` (JSON, our Server-Sent Events, chat
chunks). A door that streams also gives a ``TurnSink``: the turn's events arrive there
as they happen (``TurnBegun``, ``AnswerDelta``, ``ToolFinished``, ``AppToolCalls``), in
order.

Import-light on purpose (dataclasses, no pydantic): the doors and the turn edge build and
read these at request time, and the edge keeps a result with its Idempotency-Key as JSON
(``TurnResult.to_json``) to replay it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from convo_memory.domain.errors import ExternalRefImmutable, PrincipalImmutable
from convo_memory.domain.generation import NO_OPTIONS, FinishReason, GenerationOptions, TokenUsage
from convo_memory.domain.tools import AppToolCall

if TYPE_CHECKING:
    from convo_memory.domain.attachments import AttachmentInput
    from convo_memory.domain.item_ids import ItemPlace
    from convo_memory.domain.models import Principal, Session
    from convo_memory.domain.prompt import ChatMessage
    from convo_memory.domain.responses import ResponseRef, ResponseSettings
    from convo_memory.domain.tools import AppTools, ToolRound

# Which door served a turn (the ``Turns`` metric's dimension, a log line's ``door``): the
# native predict, its stream (buffered by the HttpApi, or streamed by the Function URL)
# and a session's messages; the chat and Responses doors, each as JSON or streamed.
DoorId = Literal[
    "predict",
    "stream-buffered",
    "stream",
    "messages",
    "chat",
    "chat-stream-buffered",
    "chat-stream",
    "responses",
    "responses-stream-buffered",
    "responses-stream",
]

# -- what a door asks -----------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedTurn:
    """A turn of history an app brings to a new conversation (``domain.imported_history``):
    a user message and the answer after it (either may be empty when the app's history
    had no partner for the other)."""

    user: str
    assistant: str


@dataclass(frozen=True)
class SessionOwner:
    """Who a call says its end user is (the chat door's ``user``, ``safety_identifier``
    or ``X-Convo-User``: the session's externalRef; None when it says none) and, when it
    sent ``X-Convo-Principal``, its principal (``principal_given``)."""

    external_ref: str | None
    principal: Principal | None = None
    principal_given: bool = False

    def check(self, session: Session) -> None:
        """Refuse a call that would change who the session is for (409)."""
        if self.external_ref is not None and session.external_ref != self.external_ref:
            raise ExternalRefImmutable(
                "this session belongs to another end user; a session's externalRef never "
                "changes (use another session for another end user)"
            )
        if self.principal_given and self.principal != session.principal:
            raise PrincipalImmutable(
                "a session's principal is stamped when it is opened and never changes; "
                "use another session to converse as someone else"
            )


@dataclass(frozen=True)
class SessionById:
    """A turn of the session ``session_id`` (predict's ``sessionId``, the session's
    message route, the chat door's ``X-Convo-Session-Id``). ``owner``: who the call says
    it is, checked against the session (the chat door; None: it says nothing)."""

    session_id: str
    owner: SessionOwner | None = None


@dataclass(frozen=True)
class SessionByKey:
    """A turn of the session an app names by its own key (the chat door's
    ``X-Convo-Session-Key``): found, or opened on first use for ``owner``, who must name
    its end user."""

    key: str
    owner: SessionOwner
    # (v4) The app's earlier messages: the first turns of the session, if this call opens it.
    history: tuple[ImportedTurn, ...] = ()

    def __post_init__(self) -> None:
        if self.owner.external_ref is None:
            raise ValueError("a session key's owner names its end user (the externalRef)")


@dataclass(frozen=True)
class SessionByResponse:
    """(v4) A turn after the stored response ``ref`` names (the Responses door's
    ``previous_response_id``): in that response's session when it is the session's
    newest, else in a fork opened at its answer. ``owner``: who the call says it is."""

    ref: ResponseRef
    owner: SessionOwner | None = None


@dataclass(frozen=True)
class NewConversation:
    """(v4) A turn that opens a conversation (the Responses door with neither
    ``conversation`` nor ``previous_response_id``) for ``owner`` (its end user may be
    None: the conversation is then reached by id alone), whose first turns are
    ``history``, the app's earlier messages."""

    owner: SessionOwner
    history: tuple[ImportedTurn, ...] = ()
    # (v5) The history as said, when it holds references the serving path must read
    # first (``REFERENCE_ROLE``): paired into turns once read.
    said: tuple[ChatMessage, ...] = ()


# (v5) A message of an app's history that only names an item of a conversation
# (``item_reference``): its role is this, its content the item's id, until the serving
# path reads the item's text where the model sees the history.
REFERENCE_ROLE = "item_reference"


@dataclass(frozen=True)
class SessionByItems:
    """(v5) A turn of the conversation the request's items name without naming it (the
    ids the service gave its items, resent by an app): as if ``previous_response_id``
    named the response of ``place``, the newest item named. When that conversation
    cannot take it here (deleted, another capability's, another end user's, archived,
    or the place not recorded), ``fallback`` opens a new one from the history, with
    ``fallback_input`` and ``fallback_rounds`` as its input (None: the request has no
    user message to open one with, 422)."""

    place: ItemPlace
    owner: SessionOwner
    fallback: NewConversation | None = None
    fallback_input: TurnPayload | None = None
    fallback_rounds: tuple[ToolRound, ...] = ()


# Which conversation a turn belongs to; None: none (a stateless turn, nothing recorded).
ConversationTarget = (
    SessionById | SessionByKey | SessionByResponse | SessionByItems | NewConversation | None
)


@dataclass(frozen=True)
class UserText:
    """A turn's input: the user's message, and (v5) the images and documents it carries
    as the door read them (``domain.attachments``)."""

    text: str
    attachments: tuple[AttachmentInput, ...] = ()


@dataclass(frozen=True)
class ToolOutput:
    """What one of the app's tools returned for the call ``call_id``."""

    call_id: str
    output: str


@dataclass(frozen=True)
class ToolResults:
    """(v4) A turn's input that continues its session's paused turn: the results of
    the app's tools, one per call the turn waits for (the chat door's trailing ``tool``
    messages; the Responses door's ``function_call_output`` items)."""

    results: tuple[ToolOutput, ...]


TurnPayload = UserText | ToolResults


@dataclass(frozen=True)
class TurnCommand:
    """What a door asks of one turn.

    ``capability_id`` None: the session's own capability (the session's message route).
    ``input``: the user's message, or (in a session) the app's tool results that
    continue a paused turn. ``history`` is what a stateless chat client sent before its
    input (``system`` messages follow the capability's instructions), and ``rounds``
    the tool exchanges it sent after that input (its own calls and their results); a
    turn in a session replays the session instead, and a paused turn keeps its own
    rounds. ``app_tools``: the app's own function tools, offered to the model beside an
    agent's (None: none). ``stream``: the door wants the answer's text as it is written
    (to its ``TurnSink``). ``conversational_only``: the door serves generative and agent
    capabilities alone (the OpenAI-compatible door), so a classic one is refused even
    stateless (409). A conversation named by a response id joins as another
    ``ConversationTarget``, read by the serving path alone."""

    capability_id: str | None
    conversation: ConversationTarget
    input: TurnPayload
    options: GenerationOptions = NO_OPTIONS
    history: tuple[ChatMessage, ...] = ()
    stream: bool = False
    conversational_only: bool = False
    app_tools: AppTools | None = None
    rounds: tuple[ToolRound, ...] = ()
    # (v4) What a Responses request set that its turn keeps for its Response (its
    # instructions join the prompt after the capability's); None through the other doors.
    response: ResponseSettings | None = None
    # (v5) The items the request's ``item_reference``s name: each must be a recorded
    # item of a conversation of the workspace (404 ``item_not_found``), checked against
    # the turn's own read where they name its conversation.
    references: tuple[ItemPlace, ...] = ()
    # (v5) False: the turn reads its conversation for the model and records nothing
    # (the Responses door's ``store: false`` with a conversation or a previous response).
    record: bool = True


# -- what a streaming door hears -------------------------------------------------------------


@dataclass(frozen=True)
class TurnBegun:
    """The turn is about to ask the model: its public id and time, and its session
    (None when stateless), known before the first delta; ``user_seq`` the position it
    begins at (the newest turn it read, plus one: a response id names it)."""

    reply_id: str
    created: int
    session_id: str | None
    user_seq: int | None = None


@dataclass(frozen=True)
class AnswerDelta:
    """Text of the answer, in order (all of it at once when a content filter stands
    between the model and the client)."""

    text: str


@dataclass(frozen=True)
class ToolFinished:
    """One of an agent's tool calls ended (``status``: ok, error or timeout)."""

    name: str
    status: str


@dataclass(frozen=True)
class AppToolCalls:
    """(v4) The turn pauses: the calls of the app's own tools it waits for, in order
    (after any text of the answer; the result follows)."""

    calls: tuple[AppToolCall, ...]


TurnEvent = TurnBegun | AnswerDelta | ToolFinished | AppToolCalls


class TurnSink(Protocol):
    """Where a streaming door hears a turn's events as they happen: a queue it streams
    from, or a list it frames once the turn is over."""

    def put(self, event: TurnEvent) -> None: ...


# -- what a turn was ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnPosition:
    """Where a recorded turn stands in its transcript (``assistant_seq = user_seq + 1``)."""

    user_seq: int
    assistant_seq: int


@dataclass(frozen=True)
class ReplayStats:
    """What the turn's prompt replayed of its session."""

    replayed_messages: int
    replayed_chars: int
    omitted_messages: int
    summary_included: bool


@dataclass(frozen=True)
class TurnResult:
    """A served turn. ``reply_id`` and ``created`` (Unix seconds) identify it to a door
    that shows them (``chatcmpl-<reply_id>``); ``turn`` is None until recorded (and for
    a stateless turn), ``context`` None for a stateless turn. ``finish``: how the model
    ended (a withheld answer's is the filter's, ``stop``; a paused turn's
    ``tool_calls``); ``usage``: what the model calls reported, when they did.
    ``tool_calls``: (v4) the calls of the app's own tools a paused turn waits for (its
    ``turn`` is None and ``recorded`` false until it ends)."""

    reply_id: str
    created: int
    output: str
    withheld: bool
    session_id: str | None
    turn: TurnPosition | None
    recorded: bool
    run_id: str | None
    context: ReplayStats | None
    finish: FinishReason = "stop"
    usage: TokenUsage | None = field(default=None)
    tool_calls: tuple[AppToolCall, ...] = ()
    # (v4) The position the turn began at (``TurnBegun.user_seq``; a paused turn's: where
    # its pause landed); None when stateless.
    begun_seq: int | None = None
    # (v5) When it ended (Unix seconds; None: not known, as in a record kept before v5).
    completed: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (camelCase): what an Idempotency-Key's record keeps."""
        turn, context, usage = self.turn, self.context, self.usage
        return {
            "replyId": self.reply_id,
            "created": self.created,
            "output": self.output,
            "withheld": self.withheld,
            "sessionId": self.session_id,
            "turn": None
            if turn is None
            else {"userSeq": turn.user_seq, "assistantSeq": turn.assistant_seq},
            "recorded": self.recorded,
            "runId": self.run_id,
            "context": None
            if context is None
            else {
                "replayedMessages": context.replayed_messages,
                "replayedChars": context.replayed_chars,
                "omittedMessages": context.omitted_messages,
                "summaryIncluded": context.summary_included,
            },
            "finish": self.finish,
            "usage": None
            if usage is None
            else {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "cachedInputTokens": usage.cached_input_tokens,
                "cacheWriteInputTokens": usage.cache_write_input_tokens,
            },
            "toolCalls": [
                {"id": call.call_id, "name": call.name, "arguments": call.arguments}
                for call in self.tool_calls
            ],
            "begunSeq": self.begun_seq,
            "completed": self.completed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnResult:
        """The result ``to_json`` wrote. A record kept before results were typed (a
        Prediction's fields, with a chat turn's ``completion``) reads as it was served."""
        completion = data.get("completion") or {}
        turn, context = data.get("turn"), data.get("context")
        return cls(
            reply_id=str(data.get("replyId") or completion.get("id", "")).removeprefix("chatcmpl-"),
            created=int(data.get("created") or completion.get("created") or 0),
            output=data["output"],
            withheld=bool(data["withheld"]),
            session_id=data.get("sessionId"),
            turn=None if turn is None else TurnPosition(turn["userSeq"], turn["assistantSeq"]),
            recorded=bool(data["recorded"]),
            run_id=data.get("runId"),
            context=None
            if context is None
            else ReplayStats(
                context["replayedMessages"],
                context["replayedChars"],
                context["omittedMessages"],
                context["summaryIncluded"],
            ),
            finish=_finish_of(data.get("finish") or completion.get("finishReason")),
            usage=_usage_of(data.get("usage") or completion.get("usage")),
            tool_calls=tuple(
                AppToolCall(str(call["id"]), str(call["name"]), str(call["arguments"]))
                for call in data.get("toolCalls") or ()
            ),
            begun_seq=data.get("begunSeq"),
            completed=data.get("completed"),
        )


def _finish_of(value: Any) -> FinishReason:
    return value if value in ("length", "tool_calls") else "stop"


def _usage_of(value: Any) -> TokenUsage | None:
    if not isinstance(value, Mapping):
        return None
    if "prompt_tokens" in value:  # a chat completion's, as kept before results were typed
        return TokenUsage(int(value["prompt_tokens"]), int(value["completion_tokens"]))
    return TokenUsage(
        int(value["inputTokens"]),
        int(value["outputTokens"]),
        int(value.get("cachedInputTokens", 0)),
        int(value.get("cacheWriteInputTokens", 0)),
    )
