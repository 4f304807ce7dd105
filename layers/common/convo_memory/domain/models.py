"""The domain's entities and values (capabilities, sessions, messages, summaries), as
pydantic models: stored and returned as camelCase JSON. What a request may send and a
turn answers is ``convo_memory.api``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from convo_memory.domain.attachments import AttachmentPolicy, FileRef

CapabilityKind = Literal["generative", "agent", "classic"]
CONVERSATIONAL_KINDS: frozenset[str] = frozenset({"generative", "agent"})


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a Z suffix (sortable as text)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def iso_at(epoch_seconds: float) -> str:
    """``iso`` of a moment given in seconds since the epoch (an injectable clock's)."""
    return iso(datetime.fromtimestamp(epoch_seconds, UTC))


def parse_iso(text: str) -> float:
    """Seconds since the epoch of an ISO-8601 timestamp written by ``iso``."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


class ApiModel(BaseModel):
    """Base for wire models: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class ReplayPolicy(ApiModel):
    # A rule JSON Schema cannot state (it compares two fields), said in the document.
    model_config = ConfigDict(
        json_schema_extra={"description": "minMessages must not exceed maxMessages."}
    )

    max_messages: int = Field(default=20, ge=1, le=200)
    max_chars: int = Field(default=12_000, ge=1, le=1_000_000)
    min_messages: int = Field(default=2, ge=1)
    # The window's start moves in steps of this many messages, so that between steps
    # each prompt extends the previous one (a provider's prompt cache can reuse it).
    alignment: int = Field(
        default=1,
        ge=1,
        le=50,
        description="The oldest replayed message is the first one at or after the rule's "
        "oldest whose seq - 1 is a multiple of alignment (never fewer than minMessages): "
        "between steps each prompt extends the previous one, so a provider can cache it.",
    )

    @model_validator(mode="after")
    def _floor_within_ceiling(self) -> ReplayPolicy:
        if self.min_messages > self.max_messages:
            raise ValueError("minMessages must be <= maxMessages")
        return self


class RecallPolicy(ApiModel):
    """Recall across an end user's sessions (opt-in). A new session takes, once, from
    each of the `sessions` newest earlier sessions of the same workspace, capability,
    externalRef and principal its rolling summary (else its newest messages), newest
    session first, `maxChars` characters in all; its turns replay it as data."""

    sessions: int = Field(ge=1, le=5)
    max_chars: int = Field(default=2_000, ge=100, le=8_000)


class Recall(ApiModel):
    """What a session recalls of its end user's earlier sessions (newest first), and
    which sessions it came from."""

    text: str
    from_sessions: list[str]


def _shorthand_schema(schema: dict[str, Any]) -> None:
    """``{type: "embedded"}``, the shorthand for ``{connection: "embedded"}``, in the
    JSON Schema (``ProviderConfig``'s validator reads it)."""
    schema["properties"]["type"] = {
        "const": "embedded",
        "description": "Shorthand for connection: embedded.",
    }
    embedded = {"properties": {"connection": {"const": "embedded"}}}
    schema["allOf"] = [{"if": {"required": ["type"]}, "then": embedded}]


class ProviderConfig(ApiModel):
    """Which model answers: a connection the operator declared, and a model it allows.

    ``{type: "embedded"}`` is accepted as shorthand for ``{connection: "embedded"}``.
    Endpoints, regions, credentials and model knobs are connection settings, never a
    workspace's: any other field is refused. Whether the connection exists and allows
    ``modelId`` depends on the deployment and is checked by the capability catalog."""

    model_config = ConfigDict(json_schema_extra=_shorthand_schema)

    connection: str = Field(
        default="embedded",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="One of the deployment's connections (GET /v1/providers).",
    )
    model_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A model the connection's models globs match; none for embedded.",
    )

    @model_validator(mode="before")
    @classmethod
    def _embedded_shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "type" not in data:
            return data
        data = dict(data)
        kind = data.pop("type")
        if kind != "embedded":
            raise ValueError(
                "provider.type is only a shorthand for the embedded connection; name one of "
                "the deployment's connections with provider.connection (GET /v1/providers)"
            )
        if data.setdefault("connection", "embedded") != "embedded":
            raise ValueError("provider.type 'embedded' contradicts provider.connection")
        return data


def upgrade_stored_provider(value: Any) -> Any:
    """A provider stored before connections existed (``{type, modelId, baseUrl, ...}``)
    as ``{connection: <type>, modelId}``: an embedded one keeps working; a bedrock or
    openai one is served only if the operator declares a connection of that name that
    allows its model. Its stored endpoint and key variable are never used again."""
    if not isinstance(value, dict) or "connection" in value or "type" not in value:
        return value
    kind = value.get("type") or "embedded"
    if kind == "embedded":
        return {"connection": "embedded"}
    return {"connection": str(kind), "modelId": value.get("modelId")}


class SummaryConfig(ApiModel):
    """Who writes the rolling summary and how long it may be. Without ``provider`` the
    capability's own model summarizes (or the deployment's default summary model, when
    the operator set one)."""

    provider: ProviderConfig | None = None
    max_chars: int = Field(default=2_000, ge=100, le=50_000)


MAX_TOOL_DESCRIPTION_CHARS = 1024
MAX_TOOL_URL_CHARS = 2048
DEFAULT_MAX_TOOL_STEPS = 5


class ToolSpec(ApiModel):
    """A tool of an agent capability as stored: a webhook (``url`` and ``inputSchema``)
    or a built-in demo tool (``name`` only). Lenient on purpose: capabilities stored
    before webhook tools existed must still load (``NewToolSpec`` checks new ones)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = Field(default="", max_length=MAX_TOOL_DESCRIPTION_CHARS)
    input_schema: dict[str, Any] | None = None
    url: str | None = Field(default=None, max_length=MAX_TOOL_URL_CHARS)

    @property
    def is_webhook(self) -> bool:
        return self.url is not None


def tool_secret_context(workspace_id: str, capability_id: str) -> dict[str, str]:
    """The encryption context a capability's signing secret is sealed with: the
    ciphertext opens only for this workspace and this capability."""
    return {"workspaceId": workspace_id, "capabilityId": capability_id}


# Bounds on what a tenant may ask the embedded filter to do per answer. Terms are plain
# substring searches (time grows with terms x answer length); patterns run on RE2, whose
# time grows with answer length x the compiled program's size, so the programs' total
# size is bounded too (see ``make bench`` for the worst pattern within these bounds).
MAX_BLOCKED_TERMS = 200
MAX_TERM_CHARS = 100
MAX_BLOCKED_PATTERNS = 20
MAX_PATTERN_CHARS = 256
MAX_PATTERN_PROGRAM_SIZE = 1_000
RE2_MAX_MEM_BYTES = 1 << 20


def compile_blocked_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching, no backtracking), with its
    memory bounded; raises ``ValueError`` when RE2 refuses it."""
    import re2  # lazily: only capabilities with a content filter pay for it

    options = re2.Options()
    options.max_mem = RE2_MAX_MEM_BYTES
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(f"blockedPatterns entry {pattern!r} is not valid RE2: {exc}") from None


# A bedrock-guardrail filter names its guardrail (``ContentFilterConfig._check``).
GUARDRAIL_NAMED: dict[str, Any] = {
    "if": {"properties": {"type": {"const": "bedrock-guardrail"}}, "required": ["type"]},
    "then": {
        "required": ["guardrailId", "guardrailVersion"],
        "properties": {
            "guardrailId": {"type": "string", "minLength": 1},
            "guardrailVersion": {"type": "string", "minLength": 1},
        },
    },
}


class ContentFilterConfig(ApiModel):
    model_config = ConfigDict(json_schema_extra={"allOf": [GUARDRAIL_NAMED]})

    type: Literal["embedded", "bedrock-guardrail"]
    blocked_terms: list[Annotated[str, Field(max_length=MAX_TERM_CHARS)]] = Field(
        default_factory=list, max_length=MAX_BLOCKED_TERMS
    )
    blocked_patterns: list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]] = (
        Field(default_factory=list, max_length=MAX_BLOCKED_PATTERNS)
    )
    guardrail_id: str | None = Field(default=None, max_length=128)
    guardrail_version: str | None = Field(default=None, max_length=32)
    withheld_message: str = Field(
        default="This answer was withheld by the content filter.", min_length=1, max_length=2000
    )

    @model_validator(mode="after")
    def _check(self) -> ContentFilterConfig:
        program_size = 0
        for pattern in self.blocked_patterns:
            program_size += compile_blocked_pattern(pattern).programsize
        if program_size > MAX_PATTERN_PROGRAM_SIZE:
            raise ValueError(
                f"blockedPatterns compile to {program_size} RE2 instructions; at most "
                f"{MAX_PATTERN_PROGRAM_SIZE} are allowed (simplify or drop a pattern)"
            )
        if self.type == "bedrock-guardrail" and not (self.guardrail_id and self.guardrail_version):
            raise ValueError("guardrailId and guardrailVersion are required for bedrock-guardrail")
        return self


class Capability(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str
    name: str
    kind: CapabilityKind
    provider: ProviderConfig
    instructions: str | None = None
    replay: ReplayPolicy | None = None
    summary: SummaryConfig | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tool_steps: int | None = None
    content_filter: ContentFilterConfig | None = None
    recall: RecallPolicy | None = None
    attachments: AttachmentPolicy | None = None  # (v5) which kinds its turns take
    created_at: str
    # The webhook signing secret, encrypted (base64 of a KMS ciphertext bound to the
    # workspace and the capability). Stored with the capability, never in an answer:
    # ``to_json_dict`` leaves it out and only ``to_stored_dict`` carries it.
    tool_secret_ciphertext: str | None = Field(default=None, exclude=True)

    @field_validator("provider", mode="before")
    @classmethod
    def _upgrade_provider(cls, value: Any) -> Any:
        return upgrade_stored_provider(value)

    @field_validator("summary", mode="before")
    @classmethod
    def _upgrade_summary_provider(cls, value: Any) -> Any:
        if isinstance(value, dict) and "provider" in value:
            return {**value, "provider": upgrade_stored_provider(value["provider"])}
        return value

    def to_json_dict(self) -> dict[str, Any]:
        """The capability as the API shows it: a conversational one without ``replay``
        shows the policy its turns use, the defaults (``null`` would say nothing)."""
        shown = super().to_json_dict()
        if self.conversational and shown.get("replay") is None:
            shown["replay"] = self.replay_policy.to_json_dict()
        return shown

    def to_stored_dict(self) -> dict[str, Any]:
        """What a capability store keeps: the API form (without ``replay`` when none was
        given, so a capability follows the defaults) plus the encrypted tool secret."""
        stored = super().to_json_dict()
        if self.tool_secret_ciphertext is not None:
            stored["toolSecretCiphertext"] = self.tool_secret_ciphertext
        return stored

    @property
    def conversational(self) -> bool:
        return self.kind in CONVERSATIONAL_KINDS

    @property
    def tool_step_limit(self) -> int:
        """Rounds of tool calls a turn may make (``maxToolSteps``, default 5)."""
        return self.max_tool_steps or DEFAULT_MAX_TOOL_STEPS

    @property
    def webhook_tools(self) -> list[ToolSpec]:
        return [tool for tool in self.tools if tool.is_webhook]

    @property
    def replay_policy(self) -> ReplayPolicy:
        return self.replay or ReplayPolicy()

    @property
    def summary_config(self) -> SummaryConfig:
        return self.summary or SummaryConfig()


@dataclasses.dataclass(frozen=True)
class CapabilityDefinition:
    """What defines a new capability, its rules already checked (``CapabilityCreate``):
    the catalog gives it an id, a time and, with webhook tools, a signing secret."""

    name: str
    kind: CapabilityKind
    provider: ProviderConfig = dataclasses.field(default_factory=ProviderConfig)
    instructions: str | None = None
    replay: ReplayPolicy | None = None
    summary: SummaryConfig | None = None
    tools: tuple[ToolSpec, ...] = ()
    max_tool_steps: int | None = None
    content_filter: ContentFilterConfig | None = None
    recall: RecallPolicy | None = None
    attachments: AttachmentPolicy | None = None

    @property
    def webhook_tools(self) -> list[ToolSpec]:
        return [tool for tool in self.tools if tool.is_webhook]

    def capability(
        self, capability_id: str, created_at: str, tool_secret_ciphertext: str | None = None
    ) -> Capability:
        """The capability this defines, as stored."""
        fields = {
            field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self)
        }
        return Capability(
            id=capability_id,
            created_at=created_at,
            tool_secret_ciphertext=tool_secret_ciphertext,
            **fields,
        )


def _plain(value: Any) -> Any:
    """A definition's value as plain data, to be validated again as a capability's."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


Principal = dict[str, str]


SessionStatus = Literal["active", "archived"]


class ForkPoint(ApiModel):
    """Where a fork branched off: its parent session and the parent's answer it follows
    (``atSeq``; 0 for a fork that inherits no message)."""

    session_id: str
    at_seq: int


class Session(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str
    workspace_id: str = Field(exclude=True)
    # (v4) None only for a conversation (``/v1/conversations``) that no response has
    # bound to a capability yet; ``external_ref`` also after one bound it without an
    # end user: such a session is reached by id alone (no listing, no erasure).
    capability_id: str | None
    external_ref: str | None
    principal: Principal | None
    metadata: dict[str, Any]
    status: SessionStatus
    created_at: str
    last_active_at: str
    message_count: int
    # Taken at creation and stored with the head; shown by the context view, never in
    # the Session JSON.
    recall: Recall | None = Field(default=None, exclude=True)
    # The app's own key when the session was opened through the OpenAI-compatible door.
    session_key: str | None = None
    # The fence nonce of this session's prompts (issue 21): generated once, never shown.
    # None for a session created before it existed (one is stored on its next turn).
    fence_nonce: str | None = Field(default=None, exclude=True, repr=False)
    # (v4) A fork's parent and the answer it branched after; None for other sessions.
    fork_of: ForkPoint | None = None
    # A fork whose older inherited messages are still being copied in: the session they
    # are copied from (never shown; None once the fork holds all of them).
    copying_from: str | None = Field(default=None, exclude=True)


Role = Literal["user", "assistant"]


class Message(ApiModel):
    seq: int
    role: Role
    content: str
    created_at: str
    withheld: bool = False
    truncated: bool = False
    # (v4) The answer of a turn that paused for the app's tools and was never continued:
    # the text that came with the calls.
    abandoned: bool = False
    # (v5) Removed (``DELETE /v1/conversations/{id}/items/{item_id}``): left out of
    # listings, replay and forks made after; never shown.
    removed: bool = Field(default=False, exclude=True)
    # (v5) A user message's images and documents, as references.
    attachments: list[FileRef] = Field(default_factory=list)


class Summary(ApiModel):
    text: str
    through_seq: int


class ToolDigest(ApiModel):
    seq: int
    tools: list[str]
    text: str


class TurnSeqs(ApiModel):
    user_seq: int
    assistant_seq: int
