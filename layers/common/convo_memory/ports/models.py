"""What the services ask of a model: providers, the tool loop's model and toolbox, the
URL policy and secret sealer of webhook tools, content filters and summarizers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from convo_memory.domain.generation import Completion, FilterVerdict, ModelStep
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.tools import (
    AUTO,
    ToolCallContext,
    ToolChoice,
    ToolDefinition,
    ToolOutcome,
    ToolRound,
)


class ModelProvider(Protocol):
    """A chat model. Errors surface as ``convo_memory.domain.errors.ProviderError``."""

    def complete(self, prompt: Prompt) -> Completion: ...

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """Yield the answer as text deltas, in order."""
        ...


# -- agent tools and the tool loop ------------------------------------------------------

TextSink = Callable[[str], None]
# (tool name, status): one call per tool call, once it has finished.
ToolEventSink = Callable[[str, str], None]


@runtime_checkable
class ToolCallingModel(Protocol):
    """A model that can call tools. Every provider type implements it (Bedrock Converse,
    OpenAI-compatible chat completions, the embedded agent); errors surface as
    ``ProviderError``."""

    def step(
        self,
        prompt: Prompt,
        rounds: Sequence[ToolRound],
        tools: Sequence[ToolDefinition],
        *,
        timeout: float,
        final: bool = False,
        on_text: TextSink | None = None,
        choice: ToolChoice = AUTO,
    ) -> ModelStep:
        """One model call, given this turn's earlier ``rounds``. ``final`` asks for the
        answer without further tool calls (any requests in the reply are then ignored);
        ``timeout`` (seconds) bounds the call; with ``on_text`` the reply is streamed and
        its text handed over as it is generated (``text`` is then their concatenation);
        ``choice`` (v4, the app's ``tool_choice`` and ``parallel_tool_calls``) how the
        tools may be called, as far as the provider can say it."""
        ...


class Toolbox(Protocol):
    """The tools of one capability: what the model is offered, and how to call them."""

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]: ...

    def call(
        self, name: str, tool_input: Mapping[str, Any], context: ToolCallContext, timeout: float
    ) -> ToolOutcome:
        """Call tool ``name``; never raises: a failure is an ``error`` or ``timeout``
        outcome whose output says what went wrong."""
        ...


class ToolUrlPolicy(Protocol):
    def problem(self, url: str) -> str | None:
        """Why a webhook tool may not be called at ``url`` (None: it may)."""
        ...


class SecretSealer(Protocol):
    """Encrypts secrets the service must use again (a webhook signing secret), bound to
    an encryption context: opening with another context fails."""

    def seal(self, plaintext: str, context: Mapping[str, str]) -> str: ...
    def open(self, ciphertext: str, context: Mapping[str, str]) -> str: ...


class ContentFilter(Protocol):
    """Checks an answer before the consumer receives it."""

    def check(self, text: str) -> FilterVerdict: ...


class Summarizer(Protocol):
    """Folds newly omitted messages into a rolling summary of at most ``max_chars``."""

    def summarize(
        self, previous: str | None, messages: list[tuple[str, str]], max_chars: int
    ) -> str: ...
