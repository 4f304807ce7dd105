"""Typed results. Each is built from the service's JSON by ``from_json``, which reads the
fields it knows and ignores the others, so a newer service never breaks an older client;
``raw`` keeps the whole JSON object for fields this version does not model yet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "Capability",
    "Context",
    "Delta",
    "Done",
    "Erasure",
    "Message",
    "Page",
    "Prediction",
    "Provider",
    "Replay",
    "Run",
    "RunStep",
    "Session",
    "StreamEvent",
    "Summary",
    "ToolDigest",
    "ToolEvent",
    "TurnContext",
    "TurnSeqs",
]

T = TypeVar("T")
JsonObject = Mapping[str, Any]


def _obj(value: Any) -> JsonObject:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any, default: int = 0) -> int:
    # bool is an int subclass; a boolean is never a count.
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any, default: float = 0.0) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def _bool(value: Any) -> bool:
    return value is True


def _time(value: Any) -> datetime | None:
    """An ISO-8601 time (the service sends UTC with a ``Z``); ``None`` when absent."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _claims(value: Any) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(k): str(v) for k, v in value.items()}


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing. Pass ``next_token`` back for the next page; ``None`` means
    this was the last one."""

    items: list[T]
    next_token: str | None


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork branched off: its parent session and the parent's answer it follows
    (``at_seq``; 0 for a fork that inherited no message)."""

    session_id: str
    at_seq: int

    @classmethod
    def from_json(cls, data: Any) -> ForkPoint | None:
        """Build from the service's JSON (``None`` for a session that is no fork)."""
        if not isinstance(data, Mapping):
            return None
        return cls(session_id=_str(data.get("sessionId")), at_seq=_int(data.get("atSeq")))


@dataclass(frozen=True)
class Session:
    """A conversation with one end user (``external_ref``) on one capability;
    ``fork_of`` says where a fork branched off. A conversation opened through the
    Responses door's ``POST /v1/conversations`` (its id is a session id) has
    ``capability_id`` None until its first response binds it, and ``external_ref`` None
    when no response named an end user: such a session is reached by its id alone."""

    id: str
    capability_id: str | None
    external_ref: str | None
    principal: dict[str, str] | None
    metadata: dict[str, Any]
    status: str
    created_at: datetime | None
    last_active_at: datetime | None
    message_count: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    fork_of: ForkPoint | None = None

    @property
    def archived(self) -> bool:
        """An archived session stays readable and takes no new turns."""
        return self.status == "archived"

    @classmethod
    def from_json(cls, data: Any) -> Session:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            id=_str(d.get("id")),
            capability_id=_opt_str(d.get("capabilityId")),
            external_ref=_opt_str(d.get("externalRef")),
            principal=_claims(d.get("principal")),
            metadata=dict(_obj(d.get("metadata"))),
            status=_str(d.get("status")),
            created_at=_time(d.get("createdAt")),
            last_active_at=_time(d.get("lastActiveAt")),
            message_count=_int(d.get("messageCount")),
            raw=dict(d),
            fork_of=ForkPoint.from_json(d.get("forkOf")),
        )


@dataclass(frozen=True)
class Message:
    """One recorded message. ``withheld``: an answer the content filter replaced;
    ``truncated``: an answer stored cut to the deployment's limit (the turn's caller
    received all of it)."""

    seq: int
    role: str
    content: str
    created_at: datetime | None
    withheld: bool = False
    truncated: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Message:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            seq=_int(d.get("seq")),
            role=_str(d.get("role")),
            content=_str(d.get("content")),
            created_at=_time(d.get("createdAt")),
            withheld=_bool(d.get("withheld")),
            truncated=_bool(d.get("truncated")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Summary:
    """The rolling summary: it covers the messages up to and including ``through_seq``."""

    text: str
    through_seq: int

    @classmethod
    def from_json(cls, data: Any) -> Summary:
        """Build from the service's JSON."""
        d = _obj(data)
        return cls(text=_str(d.get("text")), through_seq=_int(d.get("throughSeq")))


@dataclass(frozen=True)
class ToolDigest:
    """What the tools of the agent turn answered by message ``seq`` returned (truncated)."""

    seq: int
    tools: list[str]
    text: str

    @classmethod
    def from_json(cls, data: Any) -> ToolDigest:
        """Build from the service's JSON."""
        d = _obj(data)
        return cls(seq=_int(d.get("seq")), tools=_strings(d.get("tools")), text=_str(d.get("text")))


@dataclass(frozen=True)
class Recall:
    """What a session recalls of its end user's earlier sessions (taken when it was
    created), and the ids of the sessions it came from, newest first."""

    text: str
    from_sessions: list[str]

    @classmethod
    def from_json(cls, data: Any) -> Recall:
        """Build from the service's JSON."""
        d = _obj(data)
        return cls(text=_str(d.get("text")), from_sessions=_strings(d.get("fromSessions")))


@dataclass(frozen=True)
class Context:
    """What the session's next turn would see: the summary, the replayed messages (a
    newest suffix of the transcript), the digests of replayed agent turns, and how many
    older messages are left to the summary."""

    summary: Summary | None
    messages: list[Message]
    tool_digests: list[ToolDigest]
    omitted_messages: int
    replayed_chars: int
    recall: Recall | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Context:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        summary, recall = d.get("summary"), d.get("recall")
        return cls(
            summary=Summary.from_json(summary) if isinstance(summary, Mapping) else None,
            messages=[Message.from_json(m) for m in d.get("messages") or []],
            tool_digests=[ToolDigest.from_json(t) for t in d.get("toolDigests") or []],
            omitted_messages=_int(d.get("omittedMessages")),
            replayed_chars=_int(d.get("replayedChars")),
            recall=Recall.from_json(recall) if isinstance(recall, Mapping) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class SentPrompt:
    """What the model was sent for a turn's first model call (``prompt_of``): the
    capability's instructions, the recall and summary sent (or ``None``), the tool
    digests of replayed turns (``expired_digests``: the seqs of those since past their
    retention window), the replayed messages, the turn's input and the names of the
    app's own tools offered. ``summary_expired``: a summary was sent that is no longer
    kept."""

    seq: int
    instructions: str
    recall: Recall | None
    summary: Summary | None
    tool_digests: list[ToolDigest]
    messages: list[Message]
    input: str
    app_tools: list[str]
    expired_digests: list[int] = field(default_factory=list)
    summary_expired: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> SentPrompt:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        summary, recall = _obj(d.get("summary")), d.get("recall")
        digests = [_obj(t) for t in d.get("toolDigests") or []]
        return cls(
            seq=_int(d.get("seq")),
            instructions=_str(d.get("instructions")),
            recall=Recall.from_json(recall) if isinstance(recall, Mapping) else None,
            summary=Summary.from_json(summary) if "text" in summary else None,
            tool_digests=[ToolDigest.from_json(t) for t in digests if not _bool(t.get("expired"))],
            messages=[Message.from_json(m) for m in d.get("messages") or []],
            input=_str(d.get("input")),
            app_tools=_strings(d.get("appTools")),
            expired_digests=[_int(t.get("seq")) for t in digests if _bool(t.get("expired"))],
            summary_expired=_bool(summary.get("expired")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class TurnSeqs:
    """Where a turn landed in the transcript (``assistant_seq == user_seq + 1``)."""

    user_seq: int
    assistant_seq: int

    @classmethod
    def from_json(cls, data: Any) -> TurnSeqs:
        """Build from the service's JSON."""
        d = _obj(data)
        return cls(user_seq=_int(d.get("userSeq")), assistant_seq=_int(d.get("assistantSeq")))


@dataclass(frozen=True)
class TurnContext:
    """What a turn's prompt carried."""

    replayed_messages: int
    replayed_chars: int
    omitted_messages: int
    summary_included: bool

    @classmethod
    def from_json(cls, data: Any) -> TurnContext:
        """Build from the service's JSON."""
        d = _obj(data)
        return cls(
            replayed_messages=_int(d.get("replayedMessages")),
            replayed_chars=_int(d.get("replayedChars")),
            omitted_messages=_int(d.get("omittedMessages")),
            summary_included=_bool(d.get("summaryIncluded")),
        )


@dataclass(frozen=True)
class Prediction:
    """The answer of one turn. Without a session, ``session_id``, ``turn`` and ``context``
    are ``None`` and ``recorded`` is ``False``. With one, ``recorded: False`` means the
    answer was served and its transcript write is still being retried by the service."""

    output: str
    withheld: bool
    session_id: str | None
    turn: TurnSeqs | None
    recorded: bool
    run_id: str | None
    context: TurnContext | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Prediction:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        turn, context = d.get("turn"), d.get("context")
        return cls(
            output=_str(d.get("output")),
            withheld=_bool(d.get("withheld")),
            session_id=_opt_str(d.get("sessionId")),
            turn=TurnSeqs.from_json(turn) if isinstance(turn, Mapping) else None,
            recorded=_bool(d.get("recorded")),
            run_id=_opt_str(d.get("runId")),
            context=TurnContext.from_json(context) if isinstance(context, Mapping) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class Replay:
    """A capability's replay window: at most ``max_messages`` messages and ``max_chars``
    characters, newest first, with a floor of ``min_messages`` that beats the budget; its
    start moves in steps of ``alignment`` messages (so a provider can cache the prompt)."""

    max_messages: int
    max_chars: int
    min_messages: int
    alignment: int = 1

    @classmethod
    def from_json(cls, data: Any) -> Replay:
        """Build from the service's JSON (missing fields take the documented defaults)."""
        d = _obj(data)
        return cls(
            max_messages=_int(d.get("maxMessages"), 20),
            max_chars=_int(d.get("maxChars"), 12_000),
            min_messages=_int(d.get("minMessages"), 2),
            alignment=_int(d.get("alignment"), 1),
        )

    def to_json(self) -> dict[str, int]:
        """The request form (``alignment`` only when it is not the default)."""
        body = {
            "maxMessages": self.max_messages,
            "maxChars": self.max_chars,
            "minMessages": self.min_messages,
        }
        if self.alignment != 1:
            body["alignment"] = self.alignment
        return body


@dataclass(frozen=True)
class Capability:
    """Something to predict against: ``kind`` is ``generative``, ``agent`` or ``classic``.

    ``tool_signing_secret`` is set only on the answer to the ``create`` call of a
    capability with webhook tools: the service shows it once. It never appears in
    ``repr``."""

    id: str
    name: str
    kind: str
    provider: dict[str, Any]
    replay: Replay | None
    summary: dict[str, Any] | None
    tools: list[dict[str, Any]]
    content_filter: dict[str, Any] | None
    instructions: str | None
    max_tool_steps: int | None
    created_at: datetime | None
    tool_signing_secret: str | None = field(default=None, repr=False)
    recall: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Capability:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        replay, summary, content_filter = d.get("replay"), d.get("summary"), d.get("contentFilter")
        return cls(
            id=_str(d.get("id")),
            name=_str(d.get("name")),
            kind=_str(d.get("kind")),
            provider=dict(_obj(d.get("provider"))),
            replay=Replay.from_json(replay) if isinstance(replay, Mapping) else None,
            summary=dict(summary) if isinstance(summary, Mapping) else None,
            tools=[dict(t) for t in d.get("tools") or [] if isinstance(t, Mapping)],
            content_filter=dict(content_filter) if isinstance(content_filter, Mapping) else None,
            instructions=_opt_str(d.get("instructions")),
            max_tool_steps=_opt_int(d.get("maxToolSteps")),
            created_at=_time(d.get("createdAt")),
            tool_signing_secret=_opt_str(d.get("toolSigningSecret")),
            recall=dict(recall) if isinstance(recall := d.get("recall"), Mapping) else None,
            raw={k: v for k, v in d.items() if k != "toolSigningSecret"},
        )


@dataclass(frozen=True)
class Provider:
    """A provider connection the deployment's operator declared: its name (what a
    capability's ``provider.connection`` names), type, and the model globs it allows."""

    connection: str
    type: str
    models: list[str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Provider:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            connection=_str(d.get("connection")),
            type=_str(d.get("type")),
            models=_strings(d.get("models")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class RunStep:
    """One tool call of an agent run, with the principal exactly as sent to the tool."""

    tool: str
    input: Any
    output: Any
    status: str | None
    started_at: datetime | None
    duration_ms: float
    principal: dict[str, str] | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> RunStep:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            tool=_str(d.get("tool") or d.get("name")),
            input=d.get("input"),
            output=d.get("output"),
            status=_opt_str(d.get("status")),
            started_at=_time(d.get("startedAt")),
            duration_ms=_float(d.get("durationMs")),
            principal=_claims(d.get("principal")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Run:
    """The trace of an agent run. Traces outlive the conversation they came from."""

    id: str
    capability_id: str
    session_id: str | None
    principal: dict[str, str] | None
    steps: list[RunStep]
    started_at: datetime | None
    finished_at: datetime | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Run:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            id=_str(d.get("runId") or d.get("id")),
            capability_id=_str(d.get("capabilityId")),
            session_id=_opt_str(d.get("sessionId")),
            principal=_claims(d.get("principal")),
            steps=[RunStep.from_json(s) for s in d.get("steps") or []],
            started_at=_time(d.get("startedAt")),
            finished_at=_time(d.get("finishedAt")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Erasure:
    """The receipt of an end user's erasure. ``status`` is ``pending``, ``running``,
    ``done`` or ``failed``; the counts say what it erased, and which run traces it kept
    (``traces == "keep"``, the default: they are the audit record)."""

    id: str
    external_ref: str
    traces: str
    status: str
    created_at: datetime | None
    finished_at: datetime | None
    sessions_erased: int
    traces_erased: int
    traces_kept: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    @classmethod
    def from_json(cls, data: Any) -> Erasure:
        """Build from the service's JSON, ignoring fields this client does not know."""
        d = _obj(data)
        return cls(
            id=_str(d.get("id")),
            external_ref=_str(d.get("externalRef")),
            traces=_str(d.get("traces"), "keep"),
            status=_str(d.get("status")),
            created_at=_time(d.get("createdAt")),
            finished_at=_time(d.get("finishedAt")),
            sessions_erased=_int(d.get("sessionsErased")),
            traces_erased=_int(d.get("tracesErased")),
            traces_kept=_int(d.get("tracesKept")),
            raw=dict(d),
        )


# Streaming events ------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """The next piece of the answer's text."""

    text: str


@dataclass(frozen=True)
class ToolEvent:
    """An agent turn called a tool (``status`` as the service reports it)."""

    name: str
    status: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Done:
    """The turn is complete: the same Prediction the predict call returns."""

    prediction: Prediction


StreamEvent = Delta | ToolEvent | Done
