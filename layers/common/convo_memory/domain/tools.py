"""What an agent's tool calls are made of: the tools a model is offered, the calls it
asks for, what each call was sent and returned, and who it was made for; and (v4) the
app's own tools, which the app runs itself: what it offers (``AppTools``) and the calls
a paused turn hands it (``AppToolCall``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from convo_memory.domain.models import Principal

ToolStatus = Literal["ok", "error", "timeout"]
# Who ran a call: the service (an agent capability's own tools) or the app (v4).
ToolKind = Literal["service", "app"]


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
    kind: ToolKind = "service"


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as a model is offered it, and (v5) whose it is: the service's (an agent
    capability's webhooks and built-ins) or the app's (``AppTools.offered``)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    kind: ToolKind = "service"


@dataclass(frozen=True)
class ToolRequest:
    """A tool call the model asked for. ``input_error`` says why its arguments could not
    be read (the tool is then not called; the model is told why)."""

    call_id: str
    name: str
    input: Mapping[str, Any]
    input_error: str | None = None


def tool_request(call_id: str, name: str, raw: Any, what: str = "input") -> ToolRequest:
    """A model's tool call as a ``ToolRequest``, whatever the provider's wire shape:
    ``raw`` is a JSON object or its text (empty text: no arguments). Anything else
    becomes a request that carries its error, answered to the model as the tool's result
    instead of being called."""
    import json

    were = f"{what} were" if what.endswith("s") else f"{what} was"
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return ToolRequest(call_id, name, {}, f"the model's tool {were} not valid JSON")
    if not isinstance(raw, dict):
        return ToolRequest(call_id, name, {}, f"the model's tool {were} not a JSON object")
    return ToolRequest(call_id, name, raw)


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


# -- the app's own tools (v4) ---------------------------------------------------------------

ChoiceMode = Literal["auto", "none", "required", "function"]


@dataclass(frozen=True)
class ToolChoice:
    """How a model call may use the tools it is offered: ``auto`` (as it sees fit),
    ``none`` (not at all), ``required`` (at least one), ``function`` (the one named
    ``function``); ``parallel`` False asks for one call per step (None: the model's
    default)."""

    mode: ChoiceMode = "auto"
    function: str | None = None
    parallel: bool | None = None

    def after_first_step(self) -> ToolChoice:
        """What later steps of the same request get: a forced call is asked for once
        (as OpenAI's Agents SDK resets it), ``none`` stays none."""
        if self.mode in ("required", "function"):
            return ToolChoice("auto", None, self.parallel)
        return self


AUTO = ToolChoice()


@dataclass(frozen=True)
class AppTools:
    """The function tools an app offers with its request (it runs them itself), and how
    the model may call them."""

    definitions: tuple[ToolDefinition, ...]
    choice: ToolChoice = AUTO

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.definitions)

    @property
    def offered(self) -> tuple[ToolDefinition, ...]:
        """What the model is offered (marked as the app's): nothing when the app chose
        ``none``."""
        if self.choice.mode == "none":
            return ()
        return tuple(replace(tool, kind="app") for tool in self.definitions)


@dataclass(frozen=True)
class AppToolCall:
    """A call of one of the app's tools that a paused turn waits for: its id, the tool,
    and the arguments as the model wrote them (JSON text)."""

    call_id: str
    name: str
    arguments: str
