"""In-memory fakes of the non-storage ports: queues, model providers, content filters,
metrics and the clock."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from convo_memory.domain.prompt import Prompt
from convo_memory.ports import Completion, FilterVerdict, ToolCall


class FakeQueue:
    """The services' queue port: records each body as SQS would carry it (JSON)."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []
        self.attempts = 0
        self.fail_with: Exception | None = None

    def send(self, body: dict[str, Any], delay_seconds: int = 0) -> None:
        self.attempts += 1
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append((json.loads(json.dumps(body, separators=(",", ":"))), delay_seconds))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for body, _ in self.sent]


class FakeProvider:
    """A model provider that records every prompt and answers as configured.

    ``text`` may be a string or a function of the prompt; ``stream`` yields ``chunks``
    when given, else the text split into words (each chunk keeps its trailing space)."""

    def __init__(
        self,
        text: str | Callable[[Prompt], str] = "an answer",
        tool_calls: Sequence[ToolCall] = (),
        chunks: Sequence[str] | None = None,
    ) -> None:
        self.text = text
        self.tool_calls = tuple(tool_calls)
        self.chunks = tuple(chunks) if chunks is not None else None
        self.prompts: list[Prompt] = []
        self.complete_calls = 0
        self.stream_calls = 0

    def _answer(self, prompt: Prompt) -> str:
        return self.text(prompt) if callable(self.text) else self.text

    def complete(self, prompt: Prompt) -> Completion:
        self.complete_calls += 1
        self.prompts.append(prompt)
        return Completion(text=self._answer(prompt), tool_calls=self.tool_calls)

    def stream(self, prompt: Prompt) -> Iterator[str]:
        self.stream_calls += 1
        self.prompts.append(prompt)
        if self.chunks is not None:
            yield from self.chunks
            return
        words = self._answer(prompt).split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "

    @property
    def last_prompt(self) -> Prompt:
        return self.prompts[-1]


class FakeContentFilter:
    """Blocks any text containing one of ``blocked`` (case-insensitive); records checks."""

    def __init__(self, blocked: Iterable[str] = ()) -> None:
        self.blocked = tuple(term.casefold() for term in blocked)
        self.checked: list[str] = []

    def check(self, text: str) -> FilterVerdict:
        self.checked.append(text)
        folded = text.casefold()
        for term in self.blocked:
            if term in folded:
                return FilterVerdict(False, f"blocked term {term!r}")
        return FilterVerdict(True)


class FakeMetrics:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] += value


class FakeClock:
    """An injectable ``time.time``: starts at ``now`` and moves only when told."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
