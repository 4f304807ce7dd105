"""Capabilities (with their tools), the providers they may name, and agent run traces."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from convo_memory.api.common import Answer, json_depth
from convo_memory.domain.attachments import AttachmentPolicy
from convo_memory.domain.models import (
    MAX_TOOL_URL_CHARS,
    ApiModel,
    Capability,
    CapabilityDefinition,
    CapabilityKind,
    ContentFilterConfig,
    ProviderConfig,
    RecallPolicy,
    ReplayPolicy,
    SummaryConfig,
    ToolSpec,
)

BUILTIN_TOOL_NAMES: tuple[str, ...] = ("lookup_order", "search_kb")
MAX_TOOLS = 16
MAX_INPUT_SCHEMA_BYTES = 16 * 1024
MAX_INPUT_SCHEMA_DEPTH = 16
MAX_TOOL_STEPS = 10

# -- capabilities --------------------------------------------------------------------


# A webhook's URL as ``check_tool_url_syntax`` takes it, in ASCII (RFC 3986): http(s), a
# host, an optional port, no credentials, no fragment, no whitespace or control character.
TOOL_URL = (
    r"^https?://([!$&'()*+,;=A-Za-z0-9._~%-]+|\[[0-9A-Fa-f:.]+\])"
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?"
    r"([/?][!\x22\x24-\x7e]*)?$"
)


def _builtin_or_webhook(schema: dict[str, Any]) -> None:
    """``NewToolSpec`` as two shapes: a built-in tool by name alone, or a webhook with a
    url and an object inputSchema (what ``_webhook_or_builtin`` checks)."""
    properties = schema.pop("properties")
    # Each branch closes its own object: at this level additionalProperties would forbid all.
    schema.pop("required", None)
    schema.pop("additionalProperties", None)
    builtin = sorted(BUILTIN_TOOL_NAMES)
    webhook_input = {
        "type": "object",
        "description": f"A JSON Schema of an object (at most {MAX_INPUT_SCHEMA_DEPTH} levels "
        f"and {MAX_INPUT_SCHEMA_BYTES} bytes of compact JSON).",
        "required": ["type"],
        "properties": {
            "type": {"const": "object"},
            "properties": {"type": "object", "additionalProperties": {"type": "object"}},
            "required": {"type": "array", "items": {"type": "string"}},
        },
    }
    webhook_url = {
        "type": "string",
        "maxLength": MAX_TOOL_URL_CHARS,
        "pattern": TOOL_URL,
        "description": "https, resolving to public addresses (checked at creation and at each "
        "call), unless the operator allows its host.",
    }
    schema["oneOf"] = [
        {
            "title": "Built-in tool",
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"enum": builtin},
                "description": properties["description"],
                "inputSchema": {"type": "null"},
                "url": {"type": "null"},
            },
        },
        {
            "title": "Webhook tool",
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "inputSchema", "url"],
            "properties": {
                "name": {**properties["name"], "not": {"enum": builtin}},
                "description": properties["description"],
                "inputSchema": webhook_input,
                "url": webhook_url,
            },
        },
    ]


class NewToolSpec(ToolSpec):
    """A tool declared by a new capability: a webhook ``{name, description, inputSchema,
    url}`` or a built-in ``{name: "lookup_order" | "search_kb"}``. Whether ``url`` may be
    called (https, public addresses, the operator's allowed hosts) depends on the
    deployment and is checked by the capability catalog."""

    model_config = ConfigDict(json_schema_extra=_builtin_or_webhook)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")

    @model_validator(mode="after")
    def _webhook_or_builtin(self) -> NewToolSpec:
        if self.url is None:
            if self.name not in BUILTIN_TOOL_NAMES:
                raise ValueError(
                    f"tool {self.name!r} is neither a built-in tool "
                    f"({', '.join(BUILTIN_TOOL_NAMES)}) nor a webhook (give url and inputSchema)"
                )
            if self.input_schema is not None:
                raise ValueError(f"the built-in tool {self.name!r} takes no inputSchema")
            return self
        if self.name in BUILTIN_TOOL_NAMES:
            raise ValueError(f"{self.name!r} is a built-in tool's name; name the webhook otherwise")
        check_tool_url_syntax(self.url)
        if self.input_schema is None:
            raise ValueError(f"the webhook tool {self.name!r} needs an inputSchema")
        check_input_schema(self.input_schema)
        return self


def check_tool_url_syntax(url: str) -> None:
    """``http(s)://host[:port]/path[?query]``: no userinfo, no fragment."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be an https URL with a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("url must not carry credentials")
    if parts.fragment or url.endswith("#"):
        raise ValueError("url must not have a fragment")
    if port == 0:
        raise ValueError("url has an invalid port")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("url must not contain whitespace or control characters")


def check_schema_size(schema: dict[str, Any], what: str) -> None:
    """A tenant's JSON Schema, bounded in depth and in size (compact JSON)."""
    import json

    if json_depth(schema) > MAX_INPUT_SCHEMA_DEPTH:
        raise ValueError(f"{what} is at most {MAX_INPUT_SCHEMA_DEPTH} levels deep")
    compact = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    if len(compact.encode("utf-8", "surrogatepass")) > MAX_INPUT_SCHEMA_BYTES:
        raise ValueError(f"{what} is at most {MAX_INPUT_SCHEMA_BYTES} bytes of compact JSON")


def check_input_schema(schema: dict[str, Any], what: str = "inputSchema") -> None:
    """A JSON Schema of the tool's input: an object schema, bounded in size and depth
    (every provider type offers tools an object of named arguments)."""
    check_schema_size(schema, what)
    if schema.get("type") != "object":
        raise ValueError(f'{what} must describe an object: {{"type": "object", ...}}')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(value, dict) for value in properties.values()
    ):
        raise ValueError(f"{what}.properties must map names to schemas")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise ValueError(f"{what}.required must be a list of names")


def _kinds_schema(schema: dict[str, Any]) -> None:
    """What ``_kind_rules`` checks of a kind: a classic capability has no replay,
    summary nor recall; only an agent has tools."""

    def when_kind(kinds: list[str], then: dict[str, Any]) -> dict[str, Any]:
        return {
            "if": {"properties": {"kind": {"enum": kinds}}, "required": ["kind"]},
            "then": {"properties": then},
        }

    never = {"type": "null"}
    schema["allOf"] = [
        when_kind(["classic"], {"replay": never, "summary": never, "recall": never}),
        when_kind(["generative", "classic"], {"tools": {"maxItems": 0}, "maxToolSteps": never}),
    ]


class CapabilityCreate(ApiModel):
    model_config = ConfigDict(json_schema_extra=_kinds_schema)

    name: str = Field(min_length=1, max_length=200)
    kind: CapabilityKind
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    instructions: str | None = Field(default=None, max_length=20_000)
    replay: ReplayPolicy | None = None
    summary: SummaryConfig | None = None
    tools: list[NewToolSpec] = Field(default_factory=list, max_length=MAX_TOOLS)
    max_tool_steps: int | None = Field(default=None, ge=1, le=MAX_TOOL_STEPS)
    content_filter: ContentFilterConfig | None = None
    recall: RecallPolicy | None = None
    attachments: AttachmentPolicy | None = Field(
        default=None,
        description="(v5) Which attachments its turns take: {images, documents}, both true "
        "by default; a refused kind is 422 naming the part.",
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _checked_as_new(cls, value: Any) -> Any:
        # A ToolSpec built in code is checked like one sent as JSON.
        if isinstance(value, list):
            return [t.model_dump() if isinstance(t, ToolSpec) else t for t in value]
        return value

    @model_validator(mode="after")
    def _kind_rules(self) -> CapabilityCreate:
        if self.kind == "classic" and (self.replay is not None or self.summary is not None):
            raise ValueError("replay and summary apply to generative and agent capabilities")
        if self.kind == "classic" and self.recall is not None:
            raise ValueError("recall applies to generative and agent capabilities")
        if self.kind != "agent" and (self.tools or self.max_tool_steps is not None):
            raise ValueError("tools and maxToolSteps apply to agent capabilities")
        names = [tool.name for tool in self.tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique: {', '.join(duplicates)}")
        return self

    def definition(self) -> CapabilityDefinition:
        """The capability this body defines, as the catalog takes it."""
        return CapabilityDefinition(
            name=self.name,
            kind=self.kind,
            provider=self.provider,
            instructions=self.instructions,
            replay=self.replay,
            summary=self.summary,
            tools=tuple(self.tools),
            max_tool_steps=self.max_tool_steps,
            content_filter=self.content_filter,
            recall=self.recall,
            attachments=self.attachments,
        )


class CreatedCapability(Capability):
    """``POST /v1/capabilities``' answer (``created_capability``)."""

    tool_signing_secret: str | None = Field(
        default=None,
        description="With webhook tools: the secret their calls are signed with, shown only "
        "in this answer.",
    )


def created_capability(capability: Capability, tool_signing_secret: str | None) -> dict[str, Any]:
    """``POST /v1/capabilities``' answer: the capability and, with webhook tools, its
    signing secret (``toolSigningSecret``: the only time it is shown)."""
    body = capability.to_json_dict()
    if tool_signing_secret is not None:
        body["toolSigningSecret"] = tool_signing_secret
    return body


class CapabilityList(Answer):
    capabilities: list[Capability]


class Provider(Answer):
    connection: str
    type: Literal["embedded", "bedrock", "openai"]
    models: list[str]


class ProviderList(Answer):
    providers: list[Provider]


class RunStep(Answer):
    model_config = ConfigDict(extra="allow")

    tool: str
    input: dict[str, Any]
    output: str = Field(description="What the tool returned, truncated.")
    principal: dict[str, str] | None = Field(description="Exactly what the tool was sent.")
    started_at: str
    duration_ms: float


class RunTrace(Answer):
    model_config = ConfigDict(extra="allow")

    run_id: str
    capability_id: str
    session_id: str | None
    principal: dict[str, str] | None
    input: str
    output: str
    steps: list[RunStep]
    started_at: str
    finished_at: str
