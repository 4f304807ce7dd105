"""The OpenAI-compatible chat door's request and answers (``chat.completion``, its
chunks, ``/v1/models``), and the app's function tools both OpenAI doors take."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from convo_memory.api.capabilities import check_input_schema, check_schema_size
from convo_memory.api.common import Answer
from convo_memory.domain.models import (
    TurnSeqs,
)

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
    may hold depends on where it is: ``convo_memory.doors.chat_completions`` reads it. (v4) An
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
