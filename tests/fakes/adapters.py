"""In-memory fakes of the non-storage ports: queues, model providers, tools, sealing,
content filters, metrics and the clock."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from convo_memory.domain.generation import Completion, FilterVerdict, ModelStep
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.tools import (
    AUTO,
    ToolCall,
    ToolCallContext,
    ToolChoice,
    ToolDefinition,
    ToolOutcome,
    ToolRequest,
    ToolRound,
)
from convo_memory.ports import TextSink


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
    when given, else the text split into words (each chunk keeps its trailing space).
    As a tool-calling model (``step``): on a turn's first step it asks for each of
    ``tool_calls`` (their name and input; the toolbox answers), then answers ``text``."""

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
        self.steps: list[StepCall] = []

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
        self.steps.append(StepCall(prompt, tuple(rounds), tuple(tools), timeout, final, choice))
        if not rounds:
            self.prompts.append(prompt)
        if not rounds and not final and self.tool_calls:
            return ModelStep(
                "",
                tuple(
                    ToolRequest(f"call_{i}", call.name, dict(call.input))
                    for i, call in enumerate(self.tool_calls)
                ),
            )
        text = self._answer(prompt)
        if on_text is not None:
            for chunk in self.chunks if self.chunks is not None else _words(text):
                on_text(chunk)
            text = "".join(self.chunks) if self.chunks is not None else text
        return ModelStep(text)

    @property
    def last_prompt(self) -> Prompt:
        return self.prompts[-1]


@dataclass(frozen=True)
class StepCall:
    prompt: Prompt
    rounds: tuple[ToolRound, ...]
    tools: tuple[ToolDefinition, ...]
    timeout: float
    final: bool
    choice: ToolChoice = AUTO


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


@dataclass(frozen=True)
class RecordedToolCall:
    name: str
    input: dict[str, Any]
    context: ToolCallContext
    timeout: float


class FakeToolbox:
    """Tools that answer from a table: ``outputs`` maps a name to its output (text) or a
    whole ``ToolOutcome``; a name not in it answers with the output of the provider's
    ``tool_calls`` of that name, else an error. Records every call."""

    def __init__(
        self,
        outputs: Mapping[str, str | ToolOutcome] | None = None,
        provider: FakeProvider | None = None,
        names: Sequence[str] = (),
    ) -> None:
        self.outputs: dict[str, str | ToolOutcome] = dict(outputs or {})
        self.provider = provider
        self.names = tuple(names)
        self.calls: list[RecordedToolCall] = []

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        names = (
            self.names
            or tuple(self.outputs)
            or tuple(c.name for c in (self.provider.tool_calls if self.provider else ()))
        )
        return tuple(ToolDefinition(n, f"the {n} tool", {"type": "object"}) for n in names)

    def call(
        self, name: str, tool_input: Mapping[str, Any], context: ToolCallContext, timeout: float
    ) -> ToolOutcome:
        self.calls.append(RecordedToolCall(name, dict(tool_input), context, timeout))
        answer = self.outputs.get(name)
        if answer is None and self.provider is not None:
            answer = next((c.output for c in self.provider.tool_calls if c.name == name), None)
        if answer is None:
            return ToolOutcome("error", f"there is no tool named {name!r}")
        return answer if isinstance(answer, ToolOutcome) else ToolOutcome("ok", answer)


class SealerRefused(Exception):
    pass


class FakeSealer:
    """Seals a secret into an opaque token (the plaintext never appears in it) that
    opens only with the context it was sealed with."""

    def __init__(self) -> None:
        self._sealed: dict[str, tuple[str, dict[str, str]]] = {}
        self._ids = itertools.count(1)
        self.opened = 0

    def seal(self, plaintext: str, context: Mapping[str, str]) -> str:
        token = f"sealed-{next(self._ids):06d}"
        self._sealed[token] = (plaintext, dict(context))
        return token

    def open(self, ciphertext: str, context: Mapping[str, str]) -> str:
        self.opened += 1
        plaintext, sealed_context = self._sealed[ciphertext]
        if sealed_context != dict(context):
            raise SealerRefused("the encryption context does not match")
        return plaintext


class FakeResolver:
    """DNS as a table: host -> addresses; a host not in it does not resolve."""

    def __init__(self, table: Mapping[str, Sequence[str]] | None = None) -> None:
        self.table: dict[str, list[str]] = {k: list(v) for k, v in (table or {}).items()}
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"{host} does not resolve")
        return list(self.table[host])


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
    """Records every metric: ``counts`` by name (all dimensions summed), ``events`` one
    ``(name, value, dimensions)`` each, ``timings`` by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.events: list[tuple[str, float, dict[str, str]]] = []
        self.timings: dict[str, list[float]] = {}

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        self.counts[name] += value
        self.events.append((name, value, dict(dimensions)))

    def timing(self, name: str, milliseconds: float, **dimensions: str) -> None:
        self.timings.setdefault(name, []).append(milliseconds)
        self.events.append((name, milliseconds, dict(dimensions)))


class FakeClock:
    """An injectable ``time.time``: starts at ``now`` and moves only when told."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FirstSecond:
    """An injectable ``first_second(done, seconds)`` for the slow-turn watch: while
    ``slow`` is False a turn is fast (its end is waited for, whatever it takes); once it
    is True every turn has run past its first second when asked (unless it has ended
    already)."""

    def __init__(self) -> None:
        self.slow = False
        self.asked = 0
        # When set: the first second ends once this event is set (whatever ``slow``).
        self.until: threading.Event | None = None

    def __call__(self, done: threading.Event, seconds: float) -> bool:
        self.asked += 1
        if self.until is not None:
            self.until.wait(30)
            return done.is_set()
        if self.slow:
            return done.is_set()
        return done.wait(30)


class ScriptedModel:
    """A tool-calling model that answers each step from ``script`` (in order; the last
    step repeats once the script is used up) and records every call: its prompt, the
    rounds it was given, the tools it was offered, whether it was the final one and the
    tool choice. A step of the script is the answer's text, or a list of calls
    ``(call_id, tool, input)`` (with text said beside them: ``(text, calls)``)."""

    # As FakeProvider's: no calls a FakeToolbox would answer for it.
    tool_calls: tuple[ToolCall, ...] = ()

    def __init__(self, *script: str | list[tuple[str, str, dict[str, Any]]] | tuple[str, Any]):
        self.script = list(script)
        self.steps: list[StepCall] = []

    def complete(self, prompt: Prompt) -> Completion:
        raise AssertionError("a scripted model is asked through the tool loop")

    def stream(self, prompt: Prompt) -> Iterator[str]:
        raise AssertionError("a scripted model is asked through the tool loop")

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
        self.steps.append(StepCall(prompt, tuple(rounds), tuple(tools), timeout, final, choice))
        entry = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        text: str
        calls: list[tuple[str, str, dict[str, Any]]]
        if isinstance(entry, list):
            text, calls = "", entry
        elif isinstance(entry, tuple):
            text, calls = entry
        else:
            text, calls = entry, []
        if final or not calls:
            if on_text is not None:
                for piece in _words(text or "done"):
                    on_text(piece)
            return ModelStep(text or "done")
        if on_text is not None and text:
            on_text(text)
        requests = tuple(
            ToolRequest(call_id, name, dict(arguments)) for call_id, name, arguments in calls
        )
        return ModelStep(text, requests)
