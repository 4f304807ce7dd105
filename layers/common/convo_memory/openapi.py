"""The OpenAPI 3.1 document of the HTTP API (``GET /v1/openapi.json``).

Generated from one table of routes and from the pydantic models the handlers validate
with and answer with (their JSON Schemas are 2020-12, which OpenAPI 3.1 takes as is), so
the document cannot describe fields the service does not have. Every operation lists the
error responses it can give, each with its contract codes.

Powertools' own OpenAPI generation derives a document from one resolver's typed route
signatures; here the routes are spread over several functions, each with its own
resolver, and bodies go through the input gate before any model sees them, so the table
below is the one place that names them all (a test keeps it, template.yaml and the
contract in step).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema

from convo_memory import api_models as api
from convo_memory import input_gate
from convo_memory.domain import models as m
from convo_memory.domain.erasures import Erasure
from convo_memory.domain.tools import ToolStatus
from convo_memory.turn_edge import OPENAI_ERROR_TYPES

API_VERSION = "2.0.0"
REF = "#/components/schemas/{model}"


# -- response shapes the handlers build as plain dicts -----------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CapabilityList(_Wire):
    capabilities: list[m.Capability]


class SessionPage(_Wire):
    sessions: list[m.Session]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")


class MessagePage(_Wire):
    messages: list[m.Message]
    next_token: str | None = Field(description="Pass back (URL-encoded) for the next page.")


class Provider(_Wire):
    connection: str
    type: Literal["embedded", "bedrock", "openai"]
    models: list[str]


class ProviderList(_Wire):
    providers: list[Provider]


class RunStep(_Wire):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    tool: str
    input: dict[str, Any]
    output: str = Field(description="What the tool returned, truncated.")
    principal: dict[str, str] | None = Field(description="Exactly what the tool was sent.")
    started_at: str
    duration_ms: float


class RunTrace(_Wire):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    run_id: str
    capability_id: str
    session_id: str | None
    principal: dict[str, str] | None
    input: str
    output: str
    steps: list[RunStep]
    started_at: str
    finished_at: str


class ErrorDetail(_Wire):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    code: str
    message: str
    details: list[Any] | None = None
    request_id: str | None = Field(default=None, description="On 5xx: quote it to support.")


class ErrorBody(_Wire):
    error: ErrorDetail


class StreamDelta(_Wire):
    text: str = Field(description="The next piece of the answer, in order.")


class StreamTool(_Wire):
    name: str = Field(description="The tool the agent called.")
    status: ToolStatus


# -- the OpenAI-compatible door's answers (OpenAI's field names) --------------------------


class ConvoExtension(_Wire):
    session_id: str | None
    turn: m.TurnSeqs | None
    recorded: bool
    withheld: bool
    run_id: str | None


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: Literal["stop", "length", "content_filter"]
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


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    finish_reason: Literal["stop", "length", "content_filter"] | None
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


# -- the routes --------------------------------------------------------------------------

# status -> the contract codes it carries (an operation lists those that apply to it).
ERROR_CODES: dict[int, tuple[str, ...]] = {
    400: ("invalid_json",),
    401: ("unauthorized",),
    404: ("not_found",),
    409: (),
    413: ("payload_too_large",),
    422: ("validation_error",),
    429: ("rate_limited",),
    500: ("internal",),
    502: ("provider_error",),
    503: ("unavailable",),
}
ERROR_TEXT = {
    400: "The body is not UTF-8 JSON whose top level is an object (or breaks the input gate).",
    401: "No API token, or an unknown one.",
    404: "No such resource in this workspace (another workspace's is indistinguishable).",
    409: "The request conflicts with the resource's state.",
    413: "The request or its input is too large.",
    422: "Well-formed JSON that breaks the schema, or a malformed or foreign nextToken.",
    429: "Over a workspace or service limit; retry after Retry-After seconds.",
    500: "An unexpected failure, logged with its requestId.",
    502: "The model provider failed or could not be reached.",
    503: "Storage briefly unavailable; retry after Retry-After seconds.",
}
TURN_CONFLICTS = (
    "capability_not_conversational",
    "session_capability_mismatch",
    "session_archived",
    "idempotency_in_progress",
)


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    status: int = 200
    response: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    query: tuple[tuple[str, dict[str, Any], bool, str], ...] = ()
    not_found: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    reused_key: bool = False
    turn: bool = False
    stream: bool = False
    public: bool = False
    # The OpenAI-compatible door: its headers, error bodies with "type", both answer shapes.
    openai: bool = False


_LIMIT = {"type": "integer", "minimum": 1, "maximum": 100}
_TOKEN = {"type": "string", "maxLength": 2048}
_CAP, _SES = ("capability_not_found",), ("session_not_found",)

OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/v1/openapi.json", "getOpenApi", "This document", "meta", public=True),
    Operation("GET", "/v1/providers", "listProviders", "The deployment's provider connections",
              "capabilities", response=ProviderList),
    Operation("POST", "/v1/capabilities", "createCapability", "Create a capability",
              "capabilities", 201, m.Capability, api.CapabilityCreate),
    Operation("GET", "/v1/capabilities", "listCapabilities", "The workspace's capabilities",
              "capabilities", response=CapabilityList),
    Operation("GET", "/v1/capabilities/{capabilityId}", "getCapability", "A capability",
              "capabilities", response=m.Capability, not_found=_CAP),
    Operation("POST", "/v1/capabilities/{capabilityId}/predict", "predict",
              "A turn (stateless, or on a session with sessionId)", "turns",
              response=api.Prediction, body=api.TurnInput, not_found=_CAP + _SES,
              conflicts=TURN_CONFLICTS, reused_key=True, turn=True),
    Operation("POST", "/v1/capabilities/{capabilityId}/predict/stream", "predictStream",
              "The same turn as Server-Sent Events (delta, tool, done, error)", "turns",
              body=api.TurnInput, not_found=_CAP + _SES, conflicts=TURN_CONFLICTS,
              reused_key=True, turn=True, stream=True),
    Operation("POST", "/v1/sessions", "createSession", "Open a session for an end user",
              "sessions", 201, m.Session, api.SessionCreate, not_found=_CAP,
              conflicts=("capability_not_conversational",)),
    Operation("GET", "/v1/sessions", "listSessions", "An end user's sessions, newest first",
              "sessions", response=SessionPage,
              query=(("externalRef", {"type": "string", "minLength": 1, "maxLength": 256},
                      True, "Your own id of the end user."),
                     ("limit", _LIMIT, False, "Page size (default 20)."),
                     ("nextToken", _TOKEN, False, "From the previous page."))),
    Operation("GET", "/v1/sessions/{sessionId}", "getSession", "A session (archived ones too)",
              "sessions", response=m.Session, not_found=_SES),
    Operation("PATCH", "/v1/sessions/{sessionId}", "updateSession",
              "Replace a session's metadata", "sessions", response=m.Session,
              body=api.SessionPatch, not_found=_SES,
              conflicts=("principal_immutable", "external_ref_immutable")),
    Operation("DELETE", "/v1/sessions/{sessionId}", "deleteSession",
              "Delete the conversation (never its run traces)", "sessions", 204,
              not_found=_SES),
    Operation("GET", "/v1/sessions/{sessionId}/messages", "listMessages",
              "The transcript, oldest first", "sessions", response=MessagePage,
              not_found=_SES,
              query=(("limit", _LIMIT, False, "Page size (default 50)."),
                     ("nextToken", _TOKEN, False, "From the previous page."))),
    Operation("POST", "/v1/sessions/{sessionId}/messages", "sendMessage",
              "A turn on the session's own capability", "turns", response=api.Prediction,
              body=api.MessageInput, not_found=_SES + _CAP, conflicts=TURN_CONFLICTS,
              reused_key=True, turn=True),
    Operation("GET", "/v1/sessions/{sessionId}/context", "getContext",
              "Exactly what the next turn would see", "sessions", response=api.ContextView,
              not_found=_SES),
    Operation("POST", "/v1/sessions/{sessionId}/forks", "forkSession",
              "Branch the conversation after an answer (atSeq): a new session with the same "
              "end user, principal and capability, whose history is the messages up to atSeq",
              "sessions", 201, m.Session, api.ForkCreate, not_found=_SES),
    Operation("GET", "/v1/sessions/{sessionId}/messages/{seq}/prompt", "getPrompt",
              "What the model was sent for the turn of message seq (its first model call)",
              "sessions", response=api.PromptView, not_found=_SES),
    Operation("GET", "/v1/runs/{runId}", "getRun", "An agent run's trace", "runs",
              response=RunTrace, not_found=("run_not_found",)),
    Operation("GET", "/v1/models", "listModels",
              "OpenAI-compatible: the workspace's generative and agent capabilities", "openai",
              response=ModelList, openai=True),
    Operation("POST", "/v1/chat/completions", "createChatCompletion",
              "OpenAI-compatible: a turn (by X-Convo-Session-Id, by X-Convo-Session-Key and "
              "user, or stateless)", "openai", response=ChatCompletion,
              body=api.ChatCompletionRequest, not_found=_CAP + _SES,
              conflicts=(*TURN_CONFLICTS, "principal_immutable", "external_ref_immutable"),
              reused_key=True, turn=True, openai=True),
    Operation("POST", "/v1/erasures", "requestErasure",
              "Erase an end user: every session of the externalRef is 404 from the 202 on",
              "end users", 202, Erasure, api.ErasureRequest),
    Operation("GET", "/v1/erasures/{erasureId}", "getErasure",
              "An erasure's receipt (pending, running, done or failed, with its counts)",
              "end users", response=Erasure),
)  # fmt: skip
OPENAI_HEADERS = (
    ("X-Convo-Session-Id", {"type": "string", "minLength": 1, "maxLength": 128},
     "A turn of this session."),
    ("X-Convo-Session-Key", {"type": "string", "pattern": "^[\\x20-\\x7e]{1,128}$"},
     "Your own conversation id: its session is found, or opened on first use for the end "
     "user (user, safety_identifier or X-Convo-User: one is required then). Ignored with "
     "X-Convo-Session-Id."),
    ("X-Convo-User", {"type": "string", "minLength": 1, "maxLength": 256},
     "Your end user's id, for clients that cannot set body fields: as the body's user (the "
     "session's externalRef). Differing from user or safety_identifier: 422; from the "
     "session's externalRef: 409."),
    ("X-Convo-Principal", {"type": "string", "contentMediaType": "application/json"},
     "The end user's principal, a JSON object of string claims, stamped when a key's "
     "session is opened; one that differs from the session's is 409 (absent: the stored "
     "one applies)."),
)  # fmt: skip


# -- the document ------------------------------------------------------------------------


def _error_response(status: int, op: Operation) -> dict[str, Any]:
    codes = list(ERROR_CODES[status])
    if status == 404:
        codes = [*op.not_found, "not_found"]
    elif status == 409:
        codes = list(op.conflicts)
    elif status == 422 and op.reused_key:
        codes = [*codes, "idempotency_key_reused"]
    error: dict[str, Any] = {"type": "object", "properties": {"code": {"enum": codes}}}
    if op.openai:
        # For OpenAI's SDKs: the kind of error they raise.
        kind = OPENAI_ERROR_TYPES.get(status, "api_error")
        error["properties"]["type"] = {"const": kind}
        error["required"] = ["type"]
    response: dict[str, Any] = {
        "description": f"{ERROR_TEXT[status]} Codes: {', '.join(codes)}.",
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        {"$ref": REF.format(model="ErrorBody")},
                        {"type": "object", "properties": {"error": error}},
                    ]
                }
            }
        },
    }
    if status in (429, 503):
        response["headers"] = {
            "Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}
        }
    return response


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in (p[1:-1] for p in op.path.split("/") if p.startswith("{")):
        schema: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 128}
        if name == "seq":
            schema = {"type": "string", "pattern": f"^{input_gate.SEQ.pattern}$"}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    for name, schema, required, description in op.query:
        params.append(
            {
                "name": name,
                "in": "query",
                "required": required,
                "schema": schema,
                "description": description,
            }
        )
    if op.openai and op.body is not None:
        params.extend(
            {"name": name, "in": "header", "required": False, "schema": schema,
             "description": description}
            for name, schema, description in OPENAI_HEADERS
        )  # fmt: skip
    if op.turn:
        params.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": f"^{input_gate.IDEMPOTENCY_KEY.pattern}$"},
                "description": "A retry with the same key and body returns the first "
                "response and records nothing new.",
            }
        )
    return params


def _operation(op: Operation) -> dict[str, Any]:
    success: dict[str, Any] = {"description": op.summary}
    if op.stream:
        success["content"] = {"text/event-stream": _event_stream()}
    elif op.openai and op.body is not None and op.response is not None:
        success["content"] = {
            "application/json": {"schema": {"$ref": REF.format(model=_name(op.response, "o"))}},
            "text/event-stream": _chunk_stream(),
        }
        success["headers"] = {
            "X-Convo-Session-Id": {
                "schema": {"type": "string"},
                "description": "The session of the turn (absent when stateless).",
            }
        }
    elif op.response is not None:
        success["content"] = {
            "application/json": {"schema": {"$ref": REF.format(model=_name(op.response, "o"))}}
        }
    elif op.path == "/v1/openapi.json":
        success["content"] = {"application/json": {"schema": {"type": "object"}}}
    statuses = [400, 404, 413, 422, 429, 500, 503]
    if not op.public:
        statuses.append(401)
    if op.conflicts:
        statuses.append(409)
    if op.turn:
        statuses.append(502)
    document: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": _parameters(op),
        "responses": {
            str(op.status): success,
            **{str(s): _error_response(s, op) for s in sorted(statuses)},
        },
    }
    if op.body is not None:
        document["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": REF.format(model=_name(op.body, "i"))}}
            },
        }
    if op.public:
        document["security"] = []
    return document


def _event(name: str, model: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["event", "data"],
        "properties": {
            "event": {"const": name},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": REF.format(model=model)},
            },
        },
    }


def _event_stream() -> dict[str, Any]:
    """The streaming door's events. Before OpenAPI 3.2 (``itemSchema``), the ``schema``
    of a ``text/event-stream`` describes one event, as its fields (``event``, ``data``)
    with ``data`` a JSON text: what Schemathesis and OpenAPI 3.2 tooling check."""
    return {
        "schema": {
            "description": "One event of the stream: zero or more `delta` (and `tool` on an "
            "agent turn), then one `done` carrying the Prediction or one `error`.",
            "oneOf": [
                _event("delta", _name(StreamDelta, "o"), "The next piece of the answer."),
                _event("tool", _name(StreamTool, "o"), "An agent's tool call (before its answer)."),
                _event(
                    "done", _name(api.Prediction, "o"), "The turn's Prediction; the last event."
                ),
                _event(
                    "error",
                    "ErrorDetail",
                    "The turn failed after the stream began "
                    "(the error object: code, message, requestId on 5xx); the last event.",
                ),
            ],
        },
        "example": 'event: delta\ndata: {"text":"Hi"}\n\nevent: done\ndata: {...}\n\n',
    }


def _chunk_stream() -> dict[str, Any]:
    """``stream: true``: ``data: <chat.completion.chunk>`` lines, then ``data: [DONE]``."""
    return {
        "schema": {
            "description": "One `data:` line: a chat.completion.chunk (the first with the "
            "assistant's role, then the text in `delta.content`, the last with "
            "`finish_reason`), an error after the stream began, or `[DONE]` (the last).",
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {
                    "type": "string",
                    "oneOf": [
                        {"const": "[DONE]"},
                        {
                            "contentMediaType": "application/json",
                            "contentSchema": {
                                "anyOf": [
                                    {"$ref": REF.format(model=_name(ChatCompletionChunk, "o"))},
                                    {"$ref": REF.format(model="ErrorBody")},
                                ]
                            },
                        },
                    ],
                }
            },
        },
        "example": 'data: {"object":"chat.completion.chunk",...}\n\ndata: [DONE]\n\n',
    }


# -- what the server enforces beyond the models' own JSON Schemas ------------------------
# Each rule below mirrors a check made after pydantic's (in a validator, the input gate or
# a service) with the same constants, so that a request valid by the document is accepted.


@cache
def not_only_whitespace() -> str:
    """A pattern found in any text that holds a character ``str.strip`` keeps (an input
    of whitespace only is refused as empty), written for ECMA-262 and Python alike.
    Every Unicode whitespace character is in the Basic Multilingual Plane."""
    spaces = (code for code in range(0x10000) if chr(code).isspace())
    return "[^" + "".join(f"\\u{code:04x}" for code in spaces) + "]"


PRINCIPAL: dict[str, Any] = {
    "type": "object",
    "description": "String claims of the end user (for example tenant_id, user_id), stamped "
    "once when the session is opened.",
    "maxProperties": api.MAX_PRINCIPAL_CLAIMS,
    "propertyNames": {"minLength": 1, "maxLength": api.MAX_CLAIM_NAME_CHARS},
    "additionalProperties": {"type": "string", "maxLength": api.MAX_CLAIM_VALUE_CHARS},
}


def _turn_input(schema: dict[str, Any]) -> None:
    schema["properties"]["input"].update(
        minLength=1,
        pattern=not_only_whitespace(),
        description="What the end user said: not empty nor only whitespace. Over the "
        "deployment's MaxInputChars (default 32,000) characters or 200 KiB of UTF-8: 413.",
    )


def _principals(schema: dict[str, Any]) -> None:
    principal = schema.get("properties", {}).get("principal")
    if principal is None:
        return
    for branch in principal.get("anyOf", [principal]):
        if branch.get("type") == "object":
            branch.clear()
            branch.update(copy.deepcopy(PRINCIPAL))


def _session_patch(schema: dict[str, Any]) -> None:
    # Metadata is replaced as a whole: null is refused (omit it to change nothing).
    metadata = schema["properties"]["metadata"]
    metadata.pop("anyOf")
    metadata.pop("default", None)
    metadata.update(type="object", additionalProperties=True)


def _capability_kinds(schema: dict[str, Any]) -> None:
    """A classic capability has no replay, summary nor recall; only an agent has tools."""

    def when_kind(kinds: list[str], then: dict[str, Any]) -> dict[str, Any]:
        return {
            "if": {"properties": {"kind": {"enum": kinds}}, "required": ["kind"]},
            "then": {"properties": then},
        }

    schema["allOf"] = [
        when_kind(
            ["classic"],
            {"replay": {"type": "null"}, "summary": {"type": "null"}, "recall": {"type": "null"}},
        ),
        when_kind(
            ["generative", "classic"],
            {"tools": {"maxItems": 0}, "maxToolSteps": {"type": "null"}},
        ),
    ]


# A webhook's URL as ``check_tool_url_syntax`` takes it, in ASCII (RFC 3986): http(s), a
# host, an optional port, no credentials, no fragment, no whitespace or control character.
TOOL_URL = (
    r"^https?://([!$&'()*+,;=A-Za-z0-9._~%-]+|\[[0-9A-Fa-f:.]+\])"
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?"
    r"([/?][!\x22\x24-\x7e]*)?$"
)


def _new_tool(schema: dict[str, Any]) -> None:
    """A built-in tool by name alone, or a webhook with url and an object inputSchema."""
    properties = schema.pop("properties")
    # Each branch closes its own object: at this level additionalProperties would forbid all.
    schema.pop("required", None)
    schema.pop("additionalProperties", None)
    builtin = sorted(api.BUILTIN_TOOL_NAMES)
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
                "inputSchema": {
                    "type": "object",
                    "description": "A JSON Schema of an object (at most "
                    f"{api.MAX_INPUT_SCHEMA_DEPTH} levels and "
                    f"{api.MAX_INPUT_SCHEMA_BYTES} bytes of compact JSON).",
                    "required": ["type"],
                    "properties": {
                        "type": {"const": "object"},
                        "properties": {
                            "type": "object",
                            "additionalProperties": {"type": "object"},
                        },
                        "required": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "url": {
                    "type": "string",
                    "maxLength": m.MAX_TOOL_URL_CHARS,
                    "pattern": TOOL_URL,
                    "description": "https, resolving to public addresses (checked at creation "
                    "and at each call), unless the operator allows its host.",
                },
            },
        },
    ]


def _provider(schema: dict[str, Any]) -> None:
    # ``{type: "embedded"}`` is shorthand for ``{connection: "embedded"}``.
    schema["properties"]["type"] = {
        "const": "embedded",
        "description": "Shorthand for connection: embedded.",
    }
    schema["allOf"] = [
        {
            "if": {"required": ["type"]},
            "then": {"properties": {"connection": {"const": "embedded"}}},
        }
    ]
    schema["properties"]["connection"]["description"] = (
        "One of the deployment's connections (GET /v1/providers)."
    )
    schema["properties"]["modelId"]["description"] = (
        "A model the connection's models globs match; none for embedded."
    )


def _replay_floor(schema: dict[str, Any]) -> None:
    schema["description"] = "minMessages must not exceed maxMessages."


def _content_filter(schema: dict[str, Any]) -> None:
    schema["allOf"] = [
        {
            "if": {"properties": {"type": {"const": "bedrock-guardrail"}}, "required": ["type"]},
            "then": {
                "required": ["guardrailId", "guardrailVersion"],
                "properties": {
                    "guardrailId": {"type": "string", "minLength": 1},
                    "guardrailVersion": {"type": "string", "minLength": 1},
                },
            },
        }
    ]


def _chat_request(schema: dict[str, Any]) -> None:
    """The fields the OpenAI-compatible door refuses unless they ask for nothing it does
    not do (``chat_completions.REFUSED_UNLESS``), and where the turn's input is."""
    schema["description"] = (
        "In a session (X-Convo-Session-Id or X-Convo-Session-Key) only the last message "
        "counts: it must be the user's, with text content; stateless, every message must be "
        "text (system, developer, user or assistant). Other unknown fields are ignored."
    )
    never = {"type": "null"}
    schema["properties"].update(
        tools={"type": ["array", "null"], "maxItems": 0},
        functions={"type": ["array", "null"], "maxItems": 0},
        function_call=never,
        tool_choice={"enum": ["none", None]},
        n={"enum": [1, None]},
        response_format={
            "anyOf": [
                never,
                {"type": "object", "required": ["type"], "properties": {"type": {"const": "text"}}},
            ]
        },
        audio=never,
        modalities={"type": ["array", "null"], "items": {"const": "text"}},
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


REFINEMENTS = {
    "ChatCompletionRequest": (_chat_request,),
    "TurnInput": (_turn_input,),
    "MessageInput": (_turn_input,),
    "SessionPatch": (_session_patch,),
    "CapabilityCreate": (_capability_kinds,),
    "ReplayPolicy": (_replay_floor,),
    "ContentFilterConfig": (_content_filter,),
    "NewToolSpec": (_new_tool,),
    "ProviderConfig": (_provider,),
}


def _refine(defs: dict[str, Any]) -> None:
    # A renamed model must not silently lose its rules.
    missing = set(REFINEMENTS) - set(defs)
    if missing:
        raise LookupError(f"no component schema named {sorted(missing)}")
    for name, schema in defs.items():
        _principals(schema)
        for refine in REFINEMENTS.get(name, ()):
            refine(schema)


_NAMES: dict[tuple[type[BaseModel], str], str] = {}


def _name(model: type[BaseModel], mode: str) -> str:
    return _NAMES[(model, mode)]


@cache
def _components() -> dict[str, Any]:
    inputs = {op.body for op in OPERATIONS if op.body is not None}
    outputs = {op.response for op in OPERATIONS if op.response is not None}
    outputs |= {ErrorBody, StreamDelta, StreamTool, ChatCompletionChunk}
    pairs: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
        *((model, "validation") for model in sorted(inputs, key=lambda c: c.__name__)),
        *((model, "serialization") for model in sorted(outputs, key=lambda c: c.__name__)),
    ]
    keys, schema = models_json_schema(pairs, by_alias=True, ref_template=REF)
    for (model, mode), ref in keys.items():
        assert isinstance(model, type) and issubclass(model, BaseModel)
        _NAMES[(model, "i" if mode == "validation" else "o")] = ref["$ref"].rsplit("/", 1)[-1]
    defs: dict[str, Any] = schema.get("$defs", {})
    _refine(defs)
    return defs


def openapi_document(server_url: str | None = None) -> dict[str, Any]:
    """The document; ``server_url`` is where this deployment answers (if known)."""
    schemas = _components()
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "convo-memory",
            "version": API_VERSION,
            "description": "Conversation memory for stateless predictions: sessions, bounded "
            "replay, rolling summaries, agent tools. Every error is "
            '{"error": {"code", "message"}}.',
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document
