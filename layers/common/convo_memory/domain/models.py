"""Pydantic models for what the API accepts and returns. JSON is camelCase."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

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
    max_messages: int = Field(default=20, ge=1, le=200)
    max_chars: int = Field(default=12_000, ge=1, le=1_000_000)
    min_messages: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _floor_within_ceiling(self) -> ReplayPolicy:
        if self.min_messages > self.max_messages:
            raise ValueError("minMessages must be <= maxMessages")
        return self


class ProviderConfig(ApiModel):
    """Which model answers: a connection the operator declared, and a model it allows.

    ``{type: "embedded"}`` is accepted as shorthand for ``{connection: "embedded"}``.
    Endpoints, regions, credentials and model knobs are connection settings, never a
    workspace's: any other field is refused. Whether the connection exists and allows
    ``modelId`` depends on the deployment and is checked by the capability catalog."""

    connection: str = Field(
        default="embedded", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
    )
    model_id: str | None = Field(default=None, min_length=1, max_length=256)

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
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    max_chars: int = Field(default=2_000, ge=100, le=50_000)


class ToolSpec(ApiModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = Field(default="", max_length=1024)


class ContentFilterConfig(ApiModel):
    type: Literal["embedded", "bedrock-guardrail"]
    blocked_terms: list[str] = Field(default_factory=list, max_length=500)
    blocked_patterns: list[str] = Field(default_factory=list, max_length=100)
    guardrail_id: str | None = None
    guardrail_version: str | None = None
    withheld_message: str = Field(
        default="This answer was withheld by the content filter.", min_length=1, max_length=2000
    )

    @model_validator(mode="after")
    def _check(self) -> ContentFilterConfig:
        import re

        for pattern in self.blocked_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid blockedPatterns entry {pattern!r}: {exc}") from exc
        if self.type == "bedrock-guardrail" and not (self.guardrail_id and self.guardrail_version):
            raise ValueError("guardrailId and guardrailVersion are required for bedrock-guardrail")
        return self


class CapabilityCreate(ApiModel):
    name: str = Field(min_length=1, max_length=200)
    kind: CapabilityKind
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    instructions: str | None = Field(default=None, max_length=20_000)
    replay: ReplayPolicy | None = None
    summary: SummaryConfig | None = None
    tools: list[ToolSpec] = Field(default_factory=list, max_length=64)
    content_filter: ContentFilterConfig | None = None

    @model_validator(mode="after")
    def _kind_rules(self) -> CapabilityCreate:
        if self.kind == "classic":
            if self.replay is not None or self.summary is not None:
                raise ValueError("replay and summary apply to generative and agent capabilities")
            if self.tools:
                raise ValueError("tools apply to agent capabilities")
        if self.kind == "generative" and self.tools:
            raise ValueError("tools apply to agent capabilities")
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
    content_filter: ContentFilterConfig | None = None
    created_at: str

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

    @property
    def conversational(self) -> bool:
        return self.kind in CONVERSATIONAL_KINDS

    @property
    def replay_policy(self) -> ReplayPolicy:
        return self.replay or ReplayPolicy()

    @property
    def summary_config(self) -> SummaryConfig:
        return self.summary or SummaryConfig()


Principal = dict[str, str]


class SessionCreate(ApiModel):
    capability_id: str = Field(min_length=1, max_length=128)
    external_ref: str = Field(min_length=1, max_length=256)
    principal: Principal | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _limits(self) -> SessionCreate:
        _check_principal(self.principal)
        _check_metadata(self.metadata)
        return self


class SessionPatch(ApiModel):
    """A PATCH body. principal/externalRef are accepted only to be compared: naming them
    with a different value is refused (409), never silently dropped."""

    metadata: dict[str, Any] | None = None
    principal: Principal | None = None
    external_ref: str | None = None

    @model_validator(mode="after")
    def _limits(self) -> SessionPatch:
        if self.metadata is not None:
            _check_metadata(self.metadata)
        return self


def _check_principal(principal: Principal | None) -> None:
    if principal is None:
        return
    if len(principal) > 32:
        raise ValueError("principal has at most 32 claims")
    for key, value in principal.items():
        if not key or len(key) > 128 or len(value) > 1024:
            raise ValueError("principal claim names are 1-128 chars, values at most 1024")


def _check_metadata(metadata: dict[str, Any]) -> None:
    import json

    if len(json.dumps(metadata)) > 16_384:
        raise ValueError("metadata is at most 16 KiB of JSON")


SessionStatus = Literal["active", "archived"]


class Session(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str
    workspace_id: str = Field(exclude=True)
    capability_id: str
    external_ref: str
    principal: Principal | None
    metadata: dict[str, Any]
    status: SessionStatus
    created_at: str
    last_active_at: str
    message_count: int


Role = Literal["user", "assistant"]


class Message(ApiModel):
    seq: int
    role: Role
    content: str
    created_at: str
    withheld: bool = False
    truncated: bool = False


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


class TurnContext(ApiModel):
    replayed_messages: int
    replayed_chars: int
    omitted_messages: int
    summary_included: bool


class Prediction(ApiModel):
    output: str
    withheld: bool
    session_id: str | None
    turn: TurnSeqs | None
    recorded: bool
    run_id: str | None
    context: TurnContext | None


class TurnInput(ApiModel):
    input: str
    session_id: str | None = Field(default=None, max_length=128)


class MessageInput(ApiModel):
    input: str


class ContextView(ApiModel):
    summary: Summary | None
    messages: list[Message]
    tool_digests: list[ToolDigest]
    omitted_messages: int
    replayed_chars: int
