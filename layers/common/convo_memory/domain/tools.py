"""What an agent's tool calls are made of: the tools a model is offered, the calls it
asks for, what each call was sent and returned, and who it was made for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from convo_memory.domain.models import Principal

ToolStatus = Literal["ok", "error", "timeout"]


@dataclass(frozen=True)
class ToolCall:
    """A tool call that ran during a turn: exactly what was sent (``input`` and
    ``principal``), what came back (``output``, whole), its status and timing."""

    name: str
    input: Mapping[str, Any]
    output: str
    started_at: str = ""
    duration_ms: float = 0.0
    status: ToolStatus = "ok"
    principal: Principal | None = None


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as a model is offered it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ToolRequest:
    """A tool call the model asked for. ``input_error`` says why its arguments could not
    be read (the tool is then not called; the model is told why)."""

    call_id: str
    name: str
    input: Mapping[str, Any]
    input_error: str | None = None


@dataclass(frozen=True)
class ToolReply:
    """What the model is told one of its tool calls returned."""

    call_id: str
    name: str
    output: str
    is_error: bool = False


@dataclass(frozen=True)
class ToolRound:
    """One round of a turn's tool loop: what the model wrote and asked for, and the
    replies it gets back (one per request, in order)."""

    text: str
    requests: tuple[ToolRequest, ...]
    replies: tuple[ToolReply, ...]


@dataclass(frozen=True)
class ToolCallContext:
    """Who a tool call is made for: sent with every call, never taken from a request."""

    workspace_id: str
    capability_id: str
    session_id: str | None
    run_id: str
    principal: Principal | None


@dataclass(frozen=True)
class ToolOutcome:
    status: ToolStatus
    output: str
