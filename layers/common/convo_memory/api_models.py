"""The HTTP API's request bodies and the answers built for it, as pydantic models
(camelCase JSON, unknown fields refused). A request model carries the field rules every
door applies (``input_gate.parse_model``, or a route's typed body); the entities
themselves are ``convo_memory.domain.models``.

The routes' signatures name these models, so the OpenAPI document is made from them
(``convo_memory.openapi``). A rule a validator checks that JSON Schema can state is
stated here too, beside the validator (``json_schema_extra``), so that a request the
document calls valid is accepted."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel

from convo_memory.domain.erasures import Erasure as Erasure  # an erasure route's answer
from convo_memory.domain.erasures import TracePolicy
from convo_memory.domain.models import (
    MAX_TOOL_URL_CHARS,
    ApiModel,
    Capability,
    CapabilityDefinition,
    CapabilityKind,
    ContentFilterConfig,
    Message,
    Principal,
    ProviderConfig,
    Recall,
    RecallPolicy,
    ReplayPolicy,
    Session,
    Summary,
    SummaryConfig,
    ToolDigest,
    ToolSpec,
    TurnSeqs,
)
from convo_memory.domain.prompt_record import ExpiredDigest, LostSummary, SentPrompt
from convo_memory.domain.sessions import ContextPreview, NewSession, SessionChanges
from convo_memory.domain.tools import ToolStatus

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

    if _depth(schema) > MAX_INPUT_SCHEMA_DEPTH:
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


# -- sessions ------------------------------------------------------------------------

MAX_PRINCIPAL_CLAIMS = 32
MAX_CLAIM_NAME_CHARS = 64
MAX_CLAIM_VALUE_CHARS = 1024
MAX_METADATA_BYTES = 8 * 1024
MAX_METADATA_DEPTH = 8

# A principal as a request may send one (``_check_principal``).
BoundedPrincipal = Annotated[
    Principal,
    WithJsonSchema(
        {
            "type": "object",
            "description": "String claims of the end user (for example tenant_id, user_id), "
            "stamped once when the session is opened.",
            "maxProperties": MAX_PRINCIPAL_CLAIMS,
            "propertyNames": {"minLength": 1, "maxLength": MAX_CLAIM_NAME_CHARS},
            "additionalProperties": {"type": "string", "maxLength": MAX_CLAIM_VALUE_CHARS},
        }
    ),
]


class SessionCreate(ApiModel):
    capability_id: str = Field(min_length=1, max_length=128)
    external_ref: str = Field(min_length=1, max_length=256)
    principal: BoundedPrincipal | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _limits(self) -> SessionCreate:
        _check_principal(self.principal)
        _check_metadata(self.metadata)
        return self

    def new_session(self) -> NewSession:
        """The session this body asks to open."""
        return NewSession(self.capability_id, self.external_ref, self.principal, self.metadata)


def _an_object(schema: dict[str, Any]) -> None:
    schema.pop("anyOf")
    schema.pop("default", None)
    schema.update(type="object", additionalProperties=True)


class SessionPatch(ApiModel):
    """A PATCH body. principal/externalRef are accepted only to be compared: naming them
    with a different value is refused (409), never silently dropped. The same limits as
    at creation apply (422 first), so every door checks a field the same way."""

    # Replaced as a whole: null is refused (omit it to change nothing).
    metadata: dict[str, Any] | None = Field(default=None, json_schema_extra=_an_object)
    principal: BoundedPrincipal | None = None
    external_ref: str | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _limits(self) -> SessionPatch:
        _check_principal(self.principal)
        if self.metadata is not None:
            _check_metadata(self.metadata)
        return self

    def changes(self) -> SessionChanges:
        """The changes this body asks for (the fields it named, a ``null`` included)."""
        return SessionChanges(
            metadata=self.metadata,
            principal=self.principal,
            external_ref=self.external_ref,
            named=frozenset(self.model_fields_set),
        )


# Seqs are stored as ten digits.
MAX_SEQ = 9_999_999_999


class ForkCreate(ApiModel):
    """``POST /v1/sessions/{id}/forks``: a new session whose history is this one's
    messages up to ``atSeq`` (0, or the seq of a recorded answer: even). ``metadata``
    is the fork's (default: the parent's)."""

    at_seq: int = Field(ge=0, le=MAX_SEQ)
    metadata: dict[str, Any] | None = None

    @field_validator("at_seq", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # A JSON integer (2.0 is one, as JSON Schema has it); never a string or a boolean.
        if isinstance(value, bool | str):
            raise ValueError("atSeq must be an integer")
        return value

    @model_validator(mode="after")
    def _limits(self) -> ForkCreate:
        if self.metadata is not None:
            _check_metadata(self.metadata)
        return self


def _check_principal(principal: Principal | None) -> None:
    if principal is None:
        return
    if len(principal) > MAX_PRINCIPAL_CLAIMS:
        raise ValueError(f"principal has at most {MAX_PRINCIPAL_CLAIMS} claims")
    for key, value in principal.items():
        if not 1 <= len(key) <= MAX_CLAIM_NAME_CHARS or len(value) > MAX_CLAIM_VALUE_CHARS:
            raise ValueError(
                f"principal claim names are 1-{MAX_CLAIM_NAME_CHARS} characters, "
                f"values at most {MAX_CLAIM_VALUE_CHARS}"
            )


def _check_metadata(metadata: dict[str, Any]) -> None:
    import json

    # Depth first: it also bounds the work of serializing below.
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata is at most {MAX_METADATA_DEPTH} levels deep")
    compact = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
    if len(compact.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is at most {MAX_METADATA_BYTES} bytes of compact JSON")


def _depth(value: Any) -> int:
    """Levels of nested objects and arrays (``{}`` is 1), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


# -- end users -----------------------------------------------------------------------


class ErasureRequest(ApiModel):
    """Erase every session of this end user (externalRef); with traces "erase" their
    agent run traces too (kept by default: they are the audit record)."""

    external_ref: str = Field(min_length=1, max_length=256)
    traces: TracePolicy = "keep"


# -- turns ---------------------------------------------------------------------------


@cache
def not_only_whitespace() -> str:
    """A pattern found in any text that holds a character ``str.strip`` keeps (an input
    of whitespace only is refused as empty), written for ECMA-262 and Python alike.
    Every Unicode whitespace character is in the Basic Multilingual Plane."""
    spaces = (code for code in range(0x10000) if chr(code).isspace())
    return "[^" + "".join(f"\\u{code:04x}" for code in spaces) + "]"


def _said(schema: dict[str, Any]) -> None:
    # The serving path refuses an empty input (422) and a long one (413).
    schema.update(
        minLength=1,
        pattern=not_only_whitespace(),
        description="What the end user said: not empty nor only whitespace. Over the "
        "deployment's MaxInputChars (default 32,000) characters or 200 KiB of UTF-8: 413.",
    )


class TurnInput(ApiModel):
    input: str = Field(json_schema_extra=_said)
    session_id: str | None = Field(default=None, max_length=128)


class MessageInput(ApiModel):
    input: str = Field(json_schema_extra=_said)


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


class PendingCallView(ApiModel):
    """A call of one of the app's own tools a paused turn waits for."""

    id: str
    name: str
    arguments: str = Field(description="The arguments, as JSON text.")


class PendingTurnView(ApiModel):
    """(v4) A turn waiting for the app's tool results: the seq its user message will
    have, the calls it waits for, and since when (it is recorded, once, when it ends)."""

    user_seq: int
    tool_calls: list[PendingCallView]
    since: str


class ContextView(ApiModel):
    summary: Summary | None
    messages: list[Message]
    tool_digests: list[ToolDigest]
    omitted_messages: int
    replayed_chars: int
    recall: Recall | None
    pending_turn: PendingTurnView | None = None

    @classmethod
    def of(cls, preview: ContextPreview) -> ContextView:
        """``GET /v1/sessions/{id}/context``: what the next turn would see."""
        pending = preview.pending
        return cls(
            summary=preview.summary,
            messages=list(preview.messages),
            tool_digests=list(preview.tool_digests),
            omitted_messages=preview.omitted_messages,
            replayed_chars=preview.replayed_chars,
            recall=preview.recall,
            pending_turn=None
            if pending is None
            else PendingTurnView(
                user_seq=pending.user_seq,
                tool_calls=[
                    PendingCallView(id=c.call_id, name=c.name, arguments=c.arguments)
                    for c in pending.tool_calls
                ],
                since=pending.since,
            ),
        )


class ExpiredDigestView(ApiModel):
    """A tool digest the turn was sent that has since passed its retention window."""

    seq: int
    expired: Literal[True] = True


class LostSummaryView(ApiModel):
    """A summary version the turn was sent that is no longer kept (folded before
    versions were kept, and replaced since)."""

    through_seq: int
    expired: Literal[True] = True


class PromptView(ApiModel):
    """``GET /v1/sessions/{id}/messages/{seq}/prompt``: what the model was sent for that
    turn's first model call, in the shapes of ``/context``."""

    seq: int = Field(description="The turn's answer.")
    instructions: str
    recall: Recall | None
    summary: Summary | LostSummaryView | None
    tool_digests: list[ToolDigest | ExpiredDigestView]
    messages: list[Message]
    input: str
    app_tools: list[str] = Field(description="The names of the app's own tools offered.")

    @classmethod
    def of(cls, sent: SentPrompt) -> PromptView:
        summary: Summary | LostSummaryView | None = None
        if isinstance(sent.summary, LostSummary):
            summary = LostSummaryView(through_seq=sent.summary.through_seq)
        else:
            summary = sent.summary
        return cls(
            seq=sent.seq,
            instructions=sent.instructions,
            recall=sent.recall,
            summary=summary,
            tool_digests=[
                ExpiredDigestView(seq=d.seq) if isinstance(d, ExpiredDigest) else d
                for d in sent.tool_digests
            ],
            messages=list(sent.messages),
            input=sent.input,
            app_tools=list(sent.app_tools),
        )


# -- answers the routes build as JSON (their shapes, for the document) ----------------


class Answer(BaseModel):
    """An answer's shape: camelCase, and (unlike a request) open to fields added later."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CapabilityList(Answer):
    capabilities: list[Capability]


class SessionPage(Answer):
    sessions: list[Session]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")


class MessagePage(Answer):
    messages: list[Message]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")


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


class ErrorDetail(Answer):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    details: list[Any] | None = None
    request_id: str | None = Field(default=None, description="On 5xx: quote it to support.")


class ErrorBody(Answer):
    """Every error: ``{"error": {"code", "message"}}`` (``details`` on a validation
    error, ``requestId`` on a 5xx)."""

    error: ErrorDetail


class StreamDelta(Answer):
    text: str = Field(description="The next piece of the answer, in order.")


class StreamTool(Answer):
    name: str = Field(description="The tool the agent called.")
    status: ToolStatus


# -- the OpenAI-compatible door --------------------------------------------------------


# (v4) The app's own function tools: as many as OpenAI takes, named as the service's own
# tools are, their descriptions and parameter schemas bounded like other tenant input.
MAX_APP_TOOLS = 128
APP_TOOL_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
MAX_APP_TOOL_DESCRIPTION_CHARS = 4_096
MAX_CALL_ID_CHARS = 256


class FunctionCallIn(BaseModel):
    """``{name, arguments}`` of a tool call in an assistant message (arguments: JSON)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(min_length=1, max_length=64)
    arguments: str = ""


class ToolCallIn(BaseModel):
    """One entry of an assistant message's ``tool_calls``, as the model made it."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: str = Field(min_length=1, max_length=MAX_CALL_ID_CHARS)
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(BaseModel):
    """One message of a chat-completions request (OpenAI's field names). What a message
    may hold depends on where it is: ``convo_memory.chat_completions`` reads it. (v4) An
    assistant message may carry the model's ``tool_calls``; a ``tool`` message answers
    one (``tool_call_id``)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    role: str = Field(min_length=1, max_length=32)
    content: str | list[Any] | None = None
    tool_calls: list[ToolCallIn] | None = Field(default=None, max_length=MAX_APP_TOOLS)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=MAX_CALL_ID_CHARS)


class FunctionSpec(BaseModel):
    """A function the app offers: its name, what it does, its parameters' JSON Schema
    (an object; none: no parameters)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(pattern=APP_TOOL_NAME)
    description: str = Field(default="", max_length=MAX_APP_TOOL_DESCRIPTION_CHARS)
    parameters: dict[str, Any] | None = None

    @field_validator("parameters")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if "type" not in value:  # ``{}`` and friends: an object (of no parameters)
            value = {"type": "object", "properties": {}, **value}
        check_input_schema(value, "parameters")
        return value


class FunctionTools(BaseModel):
    """The Responses door's function tools (``{type: "function", name, description,
    parameters}``), bounded as the chat door's ``tools[].function`` are."""

    model_config = ConfigDict(extra="ignore", strict=True)

    tools: list[FunctionSpec] = Field(max_length=MAX_APP_TOOLS)


class FunctionTool(BaseModel):
    """``{"type": "function", "function": {...}}``: the only kind of tool an app offers
    (its own, which it runs)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(pattern=APP_TOOL_NAME)


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming one function the model must call."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=MAX_APP_TOOL_DESCRIPTION_CHARS)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    @field_validator("json_schema")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_schema_size(value, "schema")
        return value


class ResponseFormat(BaseModel):
    """Structured output: ``text`` (the default), ``json_object`` or ``json_schema``
    (with its ``json_schema``), for connections whose provider takes it."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("json_schema is required with type json_schema")
        return self

    def sent(self) -> dict[str, Any] | None:
        """What reaches the provider (None: plain text, nothing to send)."""
        if self.type == "text":
            return None
        if self.json_schema is None:
            return {"type": self.type}
        schema = self.json_schema.model_dump(by_alias=True, exclude_none=True)
        return {"type": "json_schema", "json_schema": schema}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


def _chat_request_schema(schema: dict[str, Any]) -> None:
    """The fields the door refuses unless they ask for nothing it does not do
    (``chat_completions.REFUSED_UNLESS``), and where the turn's input is."""
    schema["description"] = (
        "In a session (X-Convo-Session-Id or X-Convo-Session-Key) only the last message "
        "counts: the user's, with text content, or the trailing tool messages that answer "
        "the calls of the session's paused turn (every call, each once). Stateless, the "
        "messages reach the model as given (system, developer, user, assistant with "
        "tool_calls, tool). Other unknown fields are ignored."
    )
    never = {"type": "null"}
    schema["properties"].update(
        functions={"anyOf": [{"type": "array", "maxItems": 0}, never]},
        function_call=never,
        n={"enum": [1, None]},
        audio=never,
        modalities={"anyOf": [{"type": "array", "items": {"const": "text"}}, never]},
        logprobs={"enum": [False, None]},
        top_logprobs=never,
    )
    end_user = (
        "Your end user's id (the session's externalRef). One of user, safety_identifier "
        "or the header X-Convo-User is required with X-Convo-Session-Key; two that differ "
        "are 422, one that differs from the session's externalRef is 409. Not read when "
        "stateless."
    )
    schema["properties"]["user"]["description"] = end_user
    schema["properties"]["safety_identifier"]["description"] = end_user
    schema["properties"]["model"]["description"] = "A generative or agent capability's id."
    schema["properties"]["tools"]["description"] = (
        "The app's own function tools (it runs them): offered to the model beside an "
        "agent's own (a name used by both is 422). A turn that calls one pauses "
        "(finish_reason tool_calls); the app's next request continues it with tool messages."
    )
    schema["properties"]["response_format"]["description"] = (
        "Structured output: json_object or json_schema on connections whose provider takes "
        "it (openai; the embedded models answer JSON of the schema), 422 elsewhere; text is "
        "the default."
    )


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` as OpenAI's SDKs send it. Strict: a known field of
    the wrong JSON type (``"stream": "yes"``, ``"temperature": "0.5"``) is refused, never
    coerced. Fields the door refuses (``functions``, ``n`` above 1, ...) are kept as
    extras to be named in the 422; any other unknown field is ignored. (v4) ``tools``,
    ``tool_choice`` and ``parallel_tool_calls`` offer the app's own tools;
    ``response_format`` asks for structured output."""

    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra=_chat_request_schema)

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    safety_identifier: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: (
        Annotated[str, Field(min_length=1, max_length=256)]
        | Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=4)]
        | None
    ) = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_APP_TOOLS)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None

    @field_validator("max_tokens", "max_completion_tokens", mode="before")
    @classmethod
    def _a_json_integer(cls, value: Any) -> Any:
        # 64.0 is an integer, as JSON Schema has it; a string or a boolean never is.
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


class ConvoExtension(Answer):
    session_id: str | None
    turn: TurnSeqs | None
    recorded: bool
    withheld: bool
    run_id: str | None


class CalledFunction(BaseModel):
    name: str
    arguments: str = Field(description="The arguments, as JSON text.")


class ToolCallOut(BaseModel):
    """A call of one of the app's own tools that the paused turn waits for."""

    id: str
    type: Literal["function"]
    function: CalledFunction


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str | None = Field(description="Null when a paused turn's calls came with no text.")
    tool_calls: list[ToolCallOut] | None = Field(
        default=None,
        description="The app's own tools the turn paused for (finish_reason tool_calls): "
        "answer every call with a tool message in the next request.",
    )


ChatFinish = Literal["stop", "length", "content_filter", "tool_calls"]


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: ChatFinish
    logprobs: None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(
        description="Of prompt_tokens, those the provider read from its prompt cache."
    )


class ChatUsage(BaseModel):
    prompt_tokens: int = Field(description="The whole prompt's tokens, cached ones included.")
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class ChatCompletion(BaseModel):
    """A ``chat.completion``, with the service's ``convo`` extension."""

    id: str = Field(pattern=r"^chatcmpl-")
    object: Literal["chat.completion"]
    created: int
    model: str = Field(description="The capability id.")
    choices: list[ChatChoice]
    usage: ChatUsage | None = Field(
        default=None,
        description="The provider's count, or (the embedded models, a provider that reports "
        "none) an estimate of about four characters a token.",
    )
    convo: ConvoExtension


class CalledFunctionDelta(BaseModel):
    name: str | None = None
    arguments: str


class ToolCallDelta(BaseModel):
    """A piece of a paused turn's call: its first chunk has ``id``, ``type`` and the
    name; the next its arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: CalledFunctionDelta


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    finish_reason: ChatFinish | None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` line of a streamed completion; the last carries ``finish_reason``,
    ``convo`` and (asked for with ``stream_options.include_usage``) ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None
    convo: ConvoExtension | None = None


class ModelEntry(BaseModel):
    id: str = Field(description="A generative or agent capability's id.")
    object: Literal["model"]
    created: int
    owned_by: str = Field(description="The workspace.")


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelEntry]


# -- the Responses door and conversations (v4) ------------------------------------------

# OpenAI's limits on a response's metadata: it is kept with the response's turn.
MAX_RESPONSE_METADATA_PAIRS = 16
MAX_RESPONSE_METADATA_KEY_CHARS = 64
MAX_RESPONSE_METADATA_VALUE_CHARS = 512
ResponseMetadata = dict[
    Annotated[str, Field(min_length=1, max_length=MAX_RESPONSE_METADATA_KEY_CHARS)],
    Annotated[str, Field(max_length=MAX_RESPONSE_METADATA_VALUE_CHARS)],
]


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    id: str = Field(min_length=1, max_length=128)


def _response_request_schema(schema: dict[str, Any]) -> None:
    schema["description"] = (
        "In a conversation (conversation, previous_response_id, or a new one when store is "
        "true) only the trailing user message, or the trailing function_call_output items "
        "that continue a paused turn, is the turn's input: the items before it are your copy "
        "of the history and are ignored, except when the response opens a conversation, "
        "whose first turns they become (user and assistant messages). With store false the "
        "model sees the items as given and nothing is recorded. Image, file and audio parts, "
        "built-in tools and background are refused (422 naming the field); other unknown "
        "fields are ignored."
    )
    properties = schema["properties"]
    properties["background"] = {"enum": [False, None]}
    properties["model"]["description"] = "A generative or agent capability's id."
    end_user = (
        "Your end user's id: bound to a conversation by its first response (its externalRef); "
        "a different one later is 409."
    )
    properties["user"]["description"] = end_user
    properties["safety_identifier"]["description"] = end_user


class ResponseCreate(BaseModel):
    """``POST /v1/responses`` as OpenAI's SDKs send it. Strict, as the chat door's body:
    a known field of the wrong JSON type is refused (naming it), never coerced. The
    items of ``input`` and the ``tools`` are read by ``convo_memory.responses_door``."""

    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra=_response_request_schema
    )

    model: str = Field(min_length=1)
    input: (
        Annotated[str, Field(json_schema_extra=_said)]
        | Annotated[list[dict[str, Any]], Field(min_length=1)]
    )
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    conversation: Annotated[str, Field(min_length=1, max_length=128)] | ConversationRef | None = (
        None
    )
    store: bool | None = None
    stream: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    metadata: ResponseMetadata | None = Field(
        default=None,
        max_length=MAX_RESPONSE_METADATA_PAIRS,
        description="Kept with the response (OpenAI's limits: 16 pairs, keys of 64 "
        "characters, values of 512).",
    )
    safety_identifier: str | None = None
    user: str | None = None

    @field_validator("max_output_tokens", mode="before")
    @classmethod
    def _a_json_integer(cls, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


def _text_content(schema: dict[str, Any]) -> None:
    # What the door reads (responses_door.message_text): text, or text parts only.
    part = {
        "type": "object",
        "required": ["type", "text"],
        "properties": {
            "type": {"enum": ["input_text", "output_text", "text"]},
            "text": {"type": "string"},
        },
    }
    schema.clear()
    schema.update(
        anyOf=[{"type": "string"}, {"type": "array", "minItems": 1, "items": part}],
        description="Text, or text parts (image, file and audio parts are refused, 422).",
    )


class ConversationItemIn(BaseModel):
    """A message item of ``POST /v1/conversations`` (imported history)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["message"] = "message"
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]] = Field(json_schema_extra=_text_content)


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    metadata: dict[str, Any] | None = Field(default=None, json_schema_extra=_an_object)
    items: list[ConversationItemIn] | None = Field(
        default=None,
        max_length=20,
        description="Imported history: its first messages (user and assistant only).",
    )

    @model_validator(mode="after")
    def _limits(self) -> ConversationCreate:
        if self.metadata is not None:
            _check_metadata(self.metadata)
        return self


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    metadata: dict[str, Any] = Field(description="Replaces the conversation's metadata.")

    @model_validator(mode="after")
    def _limits(self) -> ConversationUpdate:
        _check_metadata(self.metadata)
        return self


class Conversation(BaseModel):
    id: str = Field(description="A session id: every session route takes it.")
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, Any]


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"]
    deleted: Literal[True]


class TextPart(BaseModel):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None


class MessageItem(BaseModel):
    """A message as an item: ``msg_<sessionId>_<seq>``, stable for its conversation."""

    id: str
    type: Literal["message"]
    role: Literal["user", "assistant", "developer"]
    status: Literal["completed", "incomplete"]
    content: list[TextPart]


class ItemList(BaseModel):
    object: Literal["list"]
    data: list[MessageItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FunctionCallItem(BaseModel):
    id: str
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    status: Literal["completed"]


class InputTokensDetails(BaseModel):
    cached_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["content_filter", "max_output_tokens"]


class ResponseError(BaseModel):
    code: str
    message: str


class ResponseObject(BaseModel):
    """A response (OpenAI's Response object), with the service's ``convo`` extension
    (``conversation`` is the session of its turn: a fork when it answered an older
    response)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(pattern=r"^resp_")
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress", "failed"]
    model: str = Field(description="The capability id.")
    output: list[MessageItem | FunctionCallItem]
    usage: ResponseUsage | None
    previous_response_id: str | None
    conversation: ConversationRef | None
    instructions: str | None
    metadata: dict[str, str]
    store: bool
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    incomplete_details: IncompleteDetails | None
    error: ResponseError | None
    convo: ConvoExtension | None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class ResponseStreamEvent(BaseModel):
    """The ``data`` of one event of a streamed response (its ``event:`` is its type)."""

    model_config = ConfigDict(extra="allow")

    type: str
    sequence_number: int
