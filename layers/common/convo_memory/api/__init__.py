"""The HTTP API's wire models, one module per resource (capabilities, sessions, turns,
chat, responses, and what they share in common): the request bodies and the answers
built for them, as pydantic models (camelCase JSON, unknown fields refused). A request
model carries the field rules every door applies (``request_rules.parse_model``, or a
route's typed body); the entities themselves are ``convo_memory.domain.models``.

The routes' signatures name these models, so the OpenAPI document is made from them
(``convo_memory.edge.openapi``). A rule a validator checks that JSON Schema can state is
stated here too, beside the validator (``json_schema_extra``), so that a request the
document calls valid is accepted.

Every public name is importable from here too, as route signatures name them
(``api.SessionCreate``: loaded on first use, ``convo_memory.edge.resolver``)."""

from __future__ import annotations

from convo_memory.api.capabilities import (
    BUILTIN_TOOL_NAMES,
    MAX_INPUT_SCHEMA_BYTES,
    MAX_INPUT_SCHEMA_DEPTH,
    MAX_TOOL_STEPS,
    MAX_TOOLS,
    TOOL_URL,
    CapabilityCreate,
    CapabilityList,
    CreatedCapability,
    NewToolSpec,
    Provider,
    ProviderList,
    RunStep,
    RunTrace,
    check_input_schema,
    check_schema_size,
    check_tool_url_syntax,
    created_capability,
)
from convo_memory.api.chat import (
    APP_TOOL_NAME,
    MAX_APP_TOOL_DESCRIPTION_CHARS,
    MAX_APP_TOOLS,
    MAX_CALL_ID_CHARS,
    CalledFunction,
    CalledFunctionDelta,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChatFinish,
    ChatMessageIn,
    ChatMessageOut,
    ChatUsage,
    ChunkChoice,
    ConvoExtension,
    FunctionCallIn,
    FunctionSpec,
    FunctionTool,
    FunctionTools,
    JsonSchemaFormat,
    ModelEntry,
    ModelList,
    NamedFunction,
    NamedToolChoice,
    PromptTokensDetails,
    ResponseFormat,
    StreamOptions,
    ToolCallDelta,
    ToolCallIn,
    ToolCallOut,
)
from convo_memory.api.common import (
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    Answer,
    ErrorBody,
    ErrorDetail,
    StreamDelta,
    StreamTool,
    check_metadata,
    json_depth,
    not_only_whitespace,
    object_schema,
    said_schema,
)
from convo_memory.api.files import (
    MAX_NATIVE_ATTACHMENTS,
    AttachmentIn,
    FileDeleted,
    FileList,
    FileObject,
    file_json,
    file_list,
)
from convo_memory.api.responses import (
    MAX_RESPONSE_METADATA_KEY_CHARS,
    MAX_RESPONSE_METADATA_PAIRS,
    MAX_RESPONSE_METADATA_VALUE_CHARS,
    Conversation,
    ConversationCreate,
    ConversationDeleted,
    ConversationItemIn,
    ConversationItemsAdd,
    ConversationRef,
    ConversationUpdate,
    FunctionCallItem,
    FunctionToolOut,
    IncompleteDetails,
    InputFilePart,
    InputImagePart,
    InputTokensDetails,
    ItemList,
    MessageItem,
    OutputTokensDetails,
    ResponseCreate,
    ResponseDeleted,
    ResponseError,
    ResponseMetadata,
    ResponseObject,
    ResponseStreamEvent,
    ResponseText,
    ResponseTextOut,
    ResponseUsage,
    TextFormat,
    TextPart,
)
from convo_memory.api.sessions import (
    MAX_CLAIM_NAME_CHARS,
    MAX_CLAIM_VALUE_CHARS,
    MAX_PRINCIPAL_CLAIMS,
    MAX_SEQ,
    BoundedPrincipal,
    ErasureRequest,
    ForkCreate,
    MessagePage,
    SessionCreate,
    SessionPage,
    SessionPatch,
)
from convo_memory.api.turns import (
    ContextView,
    ExpiredDigestView,
    LostSummaryView,
    MessageInput,
    PendingCallView,
    PendingTurnView,
    Prediction,
    PromptView,
    TurnContext,
    TurnInput,
)
from convo_memory.domain.erasures import Erasure  # an erasure route's answer
from convo_memory.domain.models import Capability, Session  # answers routes return as they are
