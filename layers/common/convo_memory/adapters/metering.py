"""Model calls, measured: a provider wrapped so that every call emits its latency and,
when the provider reports them, its tokens (metrics ``ModelLatency``, ``ModelCalls``,
``ModelErrors``, ``ModelInputTokens``, ``ModelOutputTokens``, ``ModelCachedInputTokens``
(read from the provider's prompt cache) and ``ModelCacheWriteInputTokens``, split by
connection). Cached tokens also go to the turn's log line
(``observability.note_cached_tokens``). A provider's failure names its connection
(``ProviderError.on_connection``), the one place that knows it.
The services see the same ports and know nothing of it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from convo_memory.domain.attachment_plan import AttachmentForm, form_of
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import Completion, ModelStep, TokenUsage
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.tools import AUTO, ToolChoice, ToolDefinition, ToolRound
from convo_memory.observability import note_cached_tokens
from convo_memory.ports import MetricsPort, ModelProvider, TextSink, ToolCallingModel


class MeteredModel:
    """A ``ModelProvider`` whose calls are measured."""

    def __init__(
        self,
        inner: ModelProvider,
        metrics: MetricsPort,
        connection: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._metrics = metrics
        self._connection = connection
        self._clock = clock

    @property
    def takes_response_format(self) -> bool:
        """Whether the measured model takes ``response_format`` (structured output)."""
        return bool(getattr(self.inner, "takes_response_format", False))

    @property
    def attachment_form(self) -> AttachmentForm:
        """(v5) How the measured model takes images and documents."""
        return form_of(self.inner)

    def _measured(self, began: float, usage: TokenUsage | None, outcome: str) -> None:
        dimensions = {"connection": self._connection}
        self._metrics.timing("ModelLatency", (self._clock() - began) * 1000, **dimensions)
        # Failures apart, not as an ``outcome`` dimension: every model metric then has the
        # same dimensions, and the turn's one EMF record holds them in one directive.
        self._metrics.count("ModelCalls", 1, **dimensions)
        if outcome != "ok":
            self._metrics.count("ModelErrors", 1, **dimensions)
        if usage is not None:
            self._metrics.count("ModelInputTokens", usage.input_tokens, **dimensions)
            self._metrics.count("ModelOutputTokens", usage.output_tokens, **dimensions)
            # Only what a cache did: a provider without one adds nothing to the record.
            if usage.cached_input_tokens:
                self._metrics.count(
                    "ModelCachedInputTokens", usage.cached_input_tokens, **dimensions
                )
            if usage.cache_write_input_tokens:
                self._metrics.count(
                    "ModelCacheWriteInputTokens", usage.cache_write_input_tokens, **dimensions
                )
            note_cached_tokens(usage.cached_input_tokens)

    def _failed(self, began: float, exc: Exception) -> None:
        self._measured(began, None, "error")
        if isinstance(exc, ProviderError):
            exc.on_connection(self._connection)

    def complete(self, prompt: Prompt) -> Completion:
        began = self._clock()
        try:
            completion = self.inner.complete(prompt)
        except Exception as exc:
            self._failed(began, exc)
            raise
        self._measured(began, completion.usage, "ok")
        return completion

    def stream(self, prompt: Prompt) -> Iterator[str]:
        began = self._clock()
        try:
            yield from self.inner.stream(prompt)
        except Exception as exc:
            self._failed(began, exc)
            raise
        self._measured(began, None, "ok")


class MeteredToolModel(MeteredModel):
    """A tool-calling model whose calls (every step of the tool loop) are measured."""

    inner: ToolCallingModel  # type: ignore[assignment]

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
        began = self._clock()
        try:
            step = self.inner.step(
                prompt, rounds, tools, timeout=timeout, final=final, on_text=on_text, choice=choice
            )
        except Exception as exc:
            self._failed(began, exc)
            raise
        self._measured(began, step.usage, "ok")
        return step


def metered(provider: ModelProvider, metrics: MetricsPort, connection: str) -> ModelProvider:
    """``provider`` with its calls measured (tool calling kept when it has it)."""
    if isinstance(provider, ToolCallingModel):
        return MeteredToolModel(provider, metrics, connection)
    return MeteredModel(provider, metrics, connection)
