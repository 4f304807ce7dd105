"""Ports: what the services need from the outside world. Adapters implement them;
unit tests use in-memory fakes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from convo_memory.domain.prompt import Prompt


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: Mapping[str, Any]
    output: str
    started_at: str = ""
    duration_ms: float = 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


class ModelProvider(Protocol):
    """A chat model. Errors surface as ``convo_memory.domain.errors.ProviderError``."""

    def complete(self, prompt: Prompt) -> Completion: ...

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """Yield the answer as text deltas, in order."""
        ...


@dataclass(frozen=True)
class FilterVerdict:
    allowed: bool
    reason: str = ""


class ContentFilter(Protocol):
    """Checks an answer before the consumer receives it."""

    def check(self, text: str) -> FilterVerdict: ...


class Summarizer(Protocol):
    """Folds newly omitted messages into a rolling summary of at most ``max_chars``."""

    def summarize(
        self, previous: str | None, messages: list[tuple[str, str]], max_chars: int
    ) -> str: ...
