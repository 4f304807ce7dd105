"""The Response object (v4, complete per the Open Responses specification in v5): its
fields from what a turn was (``ResponseState``) and what its request set
(``ResponseEcho``), and the items of its ``output``.

Every field the specification requires is there, with its type: ``completed_at``
(null until it ended), the sampling settings as used (the defaults 1, 1, 0, 0 when the
request set none), ``top_logprobs``, ``reasoning``, ``max_tool_calls``,
``service_tier``, ``background``, the end user's fields, ``prompt_cache_key``,
``truncation``, ``text`` and each tool with ``description``, ``parameters`` and
``strict`` (null where a stored response did not keep them).

Ids name where the turn landed (``domain.item_ids``): a response's and its message's
position is the recorded one once the turn is recorded, the one it began at before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convo_memory.domain.errors import ServiceError
from convo_memory.domain.generation import TokenUsage
from convo_memory.domain.item_ids import function_call_item_id
from convo_memory.domain.responses import (
    ResponseRef,
    ResponseSettings,
    message_item_id,
    unstored_response_id,
)
from convo_memory.domain.tools import AppToolCall
from convo_memory.domain.turns import TurnBegun, TurnResult

# The specification's defaults for what the service does not change.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0
# OpenAI's default for a function tool's ``strict``.
DEFAULT_STRICT = True


@dataclass(frozen=True)
class ResponseEcho:
    """What a Response repeats: its model (the capability id), what its request set
    (``settings``), its tools as sent, the ``previous_response_id`` it named, whether it
    is stored, and the end user's fields and cache key it sent (``stored``: read back
    from its turn, which did not keep the tools' descriptions and parameters)."""

    model: str
    settings: ResponseSettings = field(default_factory=ResponseSettings)
    tools: tuple[Mapping[str, Any], ...] = ()
    previous_response_id: str | None = None
    store: bool = True
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    stored: bool = False


@dataclass(frozen=True)
class TurnName:
    """How a Response names its turn: its session (None: not stored), its position
    (where it landed, else where it began) and its reply id."""

    session_id: str | None
    user_seq: int | None
    reply_id: str

    @property
    def response_id(self) -> str:
        if self.session_id is None or self.user_seq is None:
            return unstored_response_id(self.reply_id)
        return ResponseRef(self.session_id, self.user_seq, self.reply_id).id

    @property
    def answer_item_id(self) -> str:
        """The answer's item id: the conversation's id of its message when stored."""
        if self.session_id is None or self.user_seq is None:
            return f"msg_{self.reply_id}"
        return message_item_id(self.session_id, self.user_seq + 1)

    def call_item_id(self, index: int, call: AppToolCall) -> str:
        """A ``function_call`` item's id: its place in the conversation when stored."""
        if self.session_id is None or self.user_seq is None:
            return f"fc_{self.reply_id}_{index}"
        number = call.call_id.rsplit("_", 1)[-1]
        n = int(number) if number.isdigit() and call.call_id.startswith("call_") else index
        return function_call_item_id(self.session_id, self.user_seq, n)


def turn_name(item: TurnBegun | TurnResult) -> TurnName:
    """A turn's name: where a served turn landed (else began), or where one begins."""
    if isinstance(item, TurnBegun):
        return TurnName(item.session_id, item.user_seq, item.reply_id)
    landed = item.turn.user_seq if item.turn is not None else item.begun_seq
    return TurnName(item.session_id, landed, item.reply_id)


def message_item(item_id: str, role: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A message as an item (``input_text`` for what was sent, ``output_text`` for an
    answer)."""
    part: dict[str, Any] = {"type": "input_text", "text": text}
    if role == "assistant":
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": item_id, "type": "message", "role": role, "status": status, "content": [part]}


def function_call_item(name: TurnName, index: int, call: AppToolCall) -> dict[str, Any]:
    """A paused turn's call of one of the app's tools, as a ``function_call`` item."""
    return {
        "id": name.call_item_id(index, call),
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }


def usage_json(usage: TokenUsage | None) -> dict[str, Any] | None:
    """``usage`` in the Responses API's names (``input_tokens`` counts the whole prompt,
    ``cached_tokens`` the part of it the provider read from its cache)."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def incomplete_reason(withheld: bool, cut: bool) -> str | None:
    """Why an answer is incomplete: withheld by the content filter, or cut at
    ``max_output_tokens``; None for a complete one."""
    if withheld:
        return "content_filter"
    return "max_output_tokens" if cut else None


@dataclass(frozen=True)
class ResponseState:
    """A Response's own fields, however it was come by (served now, or stored)."""

    name: TurnName
    created_at: int
    status: str
    output: tuple[dict[str, Any], ...] = ()
    usage: TokenUsage | None = None
    incomplete: str | None = None
    error: ServiceError | None = None
    convo: Mapping[str, Any] | None = None
    completed_at: int | None = None


def tool_json(tool: Mapping[str, Any], stored: bool) -> dict[str, Any]:
    """A function tool as a Response shows it: ``description``, ``parameters`` and
    ``strict`` always there (null when a stored response did not keep them)."""
    strict = tool.get("strict")
    if strict is None and not stored:
        strict = DEFAULT_STRICT
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": strict,
    }


def response_body(state: ResponseState, echo: ResponseEcho) -> dict[str, Any]:
    """The Response object."""
    settings, name, error = echo.settings, state.name, state.error
    return {
        "id": name.response_id,
        "object": "response",
        "created_at": state.created_at,
        "completed_at": state.completed_at,
        "status": state.status,
        "model": echo.model,
        "output": list(state.output),
        "output_text": "".join(
            part.get("text", "")
            for item in state.output
            if item.get("type") == "message"
            for part in item.get("content", [])
        ),
        "usage": usage_json(state.usage),
        "previous_response_id": echo.previous_response_id,
        "conversation": {"id": name.session_id} if echo.store and name.session_id else None,
        "instructions": settings.instructions,
        "metadata": dict(settings.metadata),
        "store": echo.store,
        "tools": [tool_json(tool, echo.stored) for tool in echo.tools],
        "tool_choice": settings.tool_choice or "auto",
        "parallel_tool_calls": settings.parallel_tool_calls is not False,
        "temperature": _number(settings.temperature, DEFAULT_TEMPERATURE),
        "top_p": _number(settings.top_p, DEFAULT_TOP_P),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_output_tokens": settings.max_output_tokens,
        "max_tool_calls": None,
        "reasoning": None,
        "service_tier": "default",
        "text": {"format": dict(settings.text_format or {"type": "text"})},
        "truncation": "disabled",
        "background": False,
        "user": echo.user,
        "safety_identifier": echo.safety_identifier,
        "prompt_cache_key": echo.prompt_cache_key,
        "incomplete_details": {"reason": state.incomplete} if state.incomplete else None,
        "error": None if error is None else {"code": error.code, "message": error.message},
        "convo": dict(state.convo) if state.convo is not None else None,
    }


def _number(value: float | None, default: float) -> float:
    return float(default if value is None else value)
