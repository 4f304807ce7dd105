"""One model call: what a client may ask of it (the OpenAI-compatible door's
``max_tokens``, ``temperature``, ``top_p`` and ``stop``), what it returned (a
``Completion``, or in a tool loop a ``ModelStep``), what it cost (``TokenUsage``), how it
ended, and what a content filter made of the answer (``FilterVerdict``).

Each provider applies the options it takes and ignores the rest (the embedded models
take none). The operator's connection settings stay in force: a connection's
``maxTokens`` caps a client's ``max_tokens``, its ``temperature`` applies when a client
gives none."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from convo_memory.domain.tools import ToolCall, ToolRequest

# Why a model stopped writing: it finished, it reached its output token limit, or (v4)
# the turn paused for the app's own tools.
FinishReason = Literal["stop", "length", "tool_calls"]
# What a model that counts no tokens is said to use: about four characters a token (the
# usual figure for English text in OpenAI's and Anthropic's tokenizers).
CHARS_PER_TOKEN = 4


def estimated_tokens(chars: int) -> int:
    """The tokens ``chars`` characters of text are estimated to make (at least one for
    any text)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class GenerationOptions:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    # (v4) Structured output (``{"type": "json_object"}`` or ``json_schema``), for the
    # providers that take it (OpenAI-compatible); None: plain text.
    response_format: Mapping[str, Any] | None = field(default=None, hash=False)
    # (v5) What the request called it (the Responses door's ``text.format``): a refusal
    # names that field.
    response_format_field: str = "response_format"

    def capped_max_tokens(self, connection_max: int | None) -> int | None:
        """The output token limit of a call: the client's, at most the connection's."""
        if self.max_tokens is None:
            return connection_max
        if connection_max is None:
            return self.max_tokens
        return min(self.max_tokens, connection_max)

    def temperature_or(self, connection_default: float | None) -> float | None:
        return connection_default if self.temperature is None else self.temperature

    def call_settings(
        self, connection_max_tokens: int | None, connection_temperature: float | None
    ) -> dict[str, Any]:
        """The settings a model call sends, under OpenAI's names (``max_tokens``,
        ``temperature``, ``top_p``, ``stop``), each only when it has a value: the
        client's, within the connection's."""
        settings: dict[str, Any] = {
            "max_tokens": self.capped_max_tokens(connection_max_tokens),
            "temperature": self.temperature_or(connection_temperature),
            "top_p": self.top_p,
            "stop": list(self.stop) or None,
        }
        return {name: value for name, value in settings.items() if value is not None}


NO_OPTIONS = GenerationOptions()


@dataclass(frozen=True)
class TokenUsage:
    """Tokens a model call consumed, when the provider reports them. ``input_tokens``
    counts the whole prompt; ``cached_input_tokens`` the part of it the provider read
    from its prompt cache, ``cache_write_input_tokens`` the part it wrote there."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0

    def plus(self, other: TokenUsage | None) -> TokenUsage:
        """Both calls' tokens (an agent turn's model calls, added up)."""
        if other is None:
            return self
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_input_tokens + other.cache_write_input_tokens,
        )


@dataclass(frozen=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    usage: TokenUsage | None = None
    # "length": the model stopped at its output token limit.
    finish: FinishReason = "stop"


@dataclass(frozen=True)
class ModelStep:
    """One model call's outcome: tool requests, or (none) the answer ``text``."""

    text: str
    requests: tuple[ToolRequest, ...] = ()
    usage: TokenUsage | None = None
    finish: FinishReason = "stop"


@dataclass(frozen=True)
class FilterVerdict:
    allowed: bool
    reason: str = ""
