"""The Responses door and conversations: the request, the Response object and its
stream events, conversations and their items (v4)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from convo_memory.api.capabilities import check_schema_size
from convo_memory.api.chat import ConvoExtension
from convo_memory.api.common import check_metadata, object_schema, said_schema

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
        "model sees the items as given (or, with conversation or previous_response_id, that "
        "conversation) and nothing is recorded. With neither, items whose ids the service "
        "minted (message and function_call ids, item_reference, call_ids) make the request a "
        "turn of their conversation. Audio parts, built-in tools and background are refused "
        "(422 naming the field); other unknown fields are ignored."
    )
    properties = schema["properties"]
    properties["background"] = {"enum": [False, None]}
    properties["text"]["description"] = (
        "Structured output: text.format json_object or json_schema reaches the model as the "
        "chat door's response_format (422 naming it where the connection cannot take it)."
    )
    properties["model"]["description"] = "A generative or agent capability's id."
    end_user = (
        "Your end user's id: bound to a conversation by its first response (its externalRef); "
        "a different one later is 409."
    )
    properties["user"]["description"] = end_user
    properties["safety_identifier"]["description"] = end_user


class TextFormat(BaseModel):
    """(v5) ``text.format``: ``text`` (the default), ``json_object``, or ``json_schema``
    with its ``name`` and ``schema`` (OpenAI's flat form): structured output, passed to
    the model as the chat door's ``response_format``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=1024)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.json_schema is None):
            raise ValueError("json_schema takes a name and a schema")
        if self.json_schema is not None:
            check_schema_size(self.json_schema, "schema")
        return self

    def sent(self) -> dict[str, Any] | None:
        """What reaches the model, in the chat door's ``response_format`` shape (None:
        plain text)."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        nested: dict[str, Any] = {"name": self.name, "schema": self.json_schema}
        if self.description is not None:
            nested["description"] = self.description
        if self.strict is not None:
            nested["strict"] = self.strict
        return {"type": "json_schema", "json_schema": nested}

    def shown(self) -> dict[str, Any]:
        """The format as a Response shows it (OpenAI's flat form)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class ResponseText(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponseCreate(BaseModel):
    """``POST /v1/responses`` as OpenAI's SDKs send it. Strict, as the chat door's body:
    a known field of the wrong JSON type is refused (naming it), never coerced. The
    items of ``input`` and the ``tools`` are read by ``convo_memory.doors.responses``."""

    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra=_response_request_schema
    )

    model: str = Field(min_length=1)
    input: (
        Annotated[str, Field(json_schema_extra=said_schema)]
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
    # (v5) Typed, so that no value of a known field reaches a 5xx; most are echoed.
    text: ResponseText | None = None
    prompt_cache_key: str | None = Field(default=None, max_length=256)
    background: bool | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    service_tier: str | None = Field(default=None, max_length=64)
    truncation: Literal["auto", "disabled"] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None

    @field_validator("max_output_tokens", "max_tool_calls", "top_logprobs", mode="before")
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

    metadata: dict[str, Any] | None = Field(default=None, json_schema_extra=object_schema)
    items: list[ConversationItemIn] | None = Field(
        default=None,
        max_length=20,
        description="Imported history: its first messages (user and assistant only).",
    )

    @model_validator(mode="after")
    def _limits(self) -> ConversationCreate:
        if self.metadata is not None:
            check_metadata(self.metadata)
        return self


class ConversationItemsAdd(BaseModel):
    """(v5) ``POST /v1/conversations/{id}/items``: items to add as imported history."""

    model_config = ConfigDict(extra="ignore", strict=True)

    items: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=20,
        description="user and assistant message items are recorded (once: those the "
        "conversation already holds, by id or by role and text in order after its newest "
        "messages, are not added again); other item types are accepted and not recorded.",
    )


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    metadata: dict[str, Any] = Field(description="Replaces the conversation's metadata.")

    @model_validator(mode="after")
    def _limits(self) -> ConversationUpdate:
        check_metadata(self.metadata)
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


class InputImagePart(BaseModel):
    """(v5) A kept image, as a part a client can resend."""

    type: Literal["input_image"]
    file_id: str
    detail: Literal["auto", "low", "high"] = "auto"


class InputFilePart(BaseModel):
    """(v5) A kept document, as a part a client can resend."""

    type: Literal["input_file"]
    file_id: str
    filename: str


class MessageItem(BaseModel):
    """A message as an item: ``msg_<sessionId>_<seq>``, stable for its conversation
    ((v5) a user message's attachments follow its text as input parts)."""

    id: str
    type: Literal["message"]
    role: Literal["user", "assistant", "developer"]
    status: Literal["completed", "incomplete"]
    content: list[TextPart | InputImagePart | InputFilePart]


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


class FunctionToolOut(BaseModel):
    """A function tool as a Response shows it (``description``, ``parameters`` and
    ``strict`` null where a stored response did not keep them)."""

    type: Literal["function"]
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


class ResponseTextOut(BaseModel):
    format: dict[str, Any] = Field(description="text, json_object or json_schema.")


class ResponseObject(BaseModel):
    """A response (OpenAI's Response object), with the service's ``convo`` extension
    (``conversation`` is the session of its turn: a fork when it answered an older
    response)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(pattern=r"^resp_")
    object: Literal["response"]
    created_at: int
    completed_at: int | None = Field(description="When it ended; null while in progress.")
    status: Literal["completed", "incomplete", "in_progress", "failed"]
    model: str = Field(description="The capability id.")
    output: list[MessageItem | FunctionCallItem]
    usage: ResponseUsage | None
    previous_response_id: str | None
    conversation: ConversationRef | None
    instructions: str | None
    metadata: dict[str, str]
    store: bool
    tools: list[FunctionToolOut]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    temperature: float = Field(description="As used: 1 unless the request set it.")
    top_p: float = Field(description="As used: 1 unless the request set it.")
    presence_penalty: float
    frequency_penalty: float
    top_logprobs: int
    max_output_tokens: int | None
    max_tool_calls: int | None
    reasoning: dict[str, Any] | None
    service_tier: str
    text: ResponseTextOut
    truncation: Literal["auto", "disabled"]
    background: bool
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None
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
