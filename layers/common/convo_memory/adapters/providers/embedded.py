"""Embedded providers: deterministic, no network. The default of the local runtime.

The answer always contains the user's latest input verbatim (contract), followed by a
short note that shows what the model was given (how many earlier messages, whether a
summary or tool results were in the prompt), so tests and demos can see memory at work.

(v4) Both call tools the same way (``step``): each offered tool whose name occurs in
the user's input, once each (the agent's built-in tools by their own rule), then they
answer quoting what the tools returned. So the app's own tools work on ``make run`` with
no network. ``tool_choice`` is followed (``required``: the first tool when no name
occurs; a named function: that one), and ``parallel_tool_calls: false`` makes one call
per step.

(v5) They follow the app's schemas (``embedded_shapes``): an app tool's arguments
conform to its ``parameters`` (an agent's webhooks keep ``{"query": "<input>"}``), an
answer under structured output is JSON of its schema, and in a fork every answer opens
by naming the fork, so a regenerated answer differs from its parent's.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from convo_memory.adapters.providers.embedded_shapes import (
    attachments_note,
    shaped_answer,
    tool_arguments,
)
from convo_memory.adapters.tools.builtin import (
    BUILTIN_DEFINITIONS,
    kb_fact,
    order_fact,
    run_builtin,
)
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import Completion, ModelStep
from convo_memory.domain.models import iso, utc_now
from convo_memory.domain.prompt import Prompt, estimated_usage
from convo_memory.domain.tools import (
    AUTO,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolReply,
    ToolRequest,
    ToolRound,
)
from convo_memory.ports import TextSink

_FENCE_OPEN = re.compile(r'<data-([0-9A-Za-z]+) kind="([a-z-]+)"')
# Whitespace-delimited pieces: each chunk is a word plus the whitespace that follows it.
_CHUNK_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")
_ORDER_NUMBER = re.compile(r"(?<!\d)(\d{3,12})(?!\d)")
_STATUS_MARK = re.compile(r"^\[(error|timeout)\] ")
# Milliseconds before each streamed chunk, for demos and browser tests that watch an
# answer arrive (``make run`` answers instantly otherwise).
CHUNK_DELAY_ENV = "CONVO_EMBEDDED_CHUNK_DELAY_MS"


def chunk_delay_from_env() -> float:
    """``CONVO_EMBEDDED_CHUNK_DELAY_MS`` in seconds; 0 when unset or not a positive number."""
    try:
        return max(0.0, float(os.environ.get(CHUNK_DELAY_ENV) or 0) / 1000)
    except ValueError:
        return 0.0


def latest_input(prompt: Prompt) -> str:
    """The current user input (the last message may carry a replayed digest before it)."""
    if prompt.user_input:
        return prompt.user_input
    if prompt.messages:
        return prompt.messages[-1].content
    return ""


def _prompt_text(prompt: Prompt) -> str:
    """Everything the model reads: the system text and the messages (a replayed digest
    travels in a message)."""
    return "\n\n".join([prompt.system, *(m.content for m in prompt.messages)])


def _fenced_kinds(prompt: Prompt) -> Counter[str]:
    """Count the data blocks (recall, summary, tool-results) the prompt carries. With a
    nonce only real fences count: the fence strips the nonce from the data it wraps."""
    kinds: Counter[str] = Counter()
    for nonce, kind in _FENCE_OPEN.findall(_prompt_text(prompt)):
        if not prompt.fence_nonce or nonce == prompt.fence_nonce:
            kinds[kind] += 1
    return kinds


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def memory_note(prompt: Prompt) -> str:
    """A deterministic sentence or two describing what the prompt remembered."""
    earlier = max(len(prompt.messages) - 1, 0)
    note = f"I remember {_plural(earlier, 'earlier message')}."
    kinds = _fenced_kinds(prompt)
    if kinds["summary"]:
        note += " I also have a summary of our earlier conversation."
    if kinds["tool-results"]:
        note += f" I have tool results from {_plural(kinds['tool-results'], 'earlier turn')}."
    if kinds["recall"]:
        note += " I also recall what you told me in earlier conversations."
    files = attachments_note(prompt)
    return f"{note} {files}" if files else note


def split_chunks(text: str) -> list[str]:
    """Split into word-ish pieces whose concatenation is exactly ``text``."""
    return [piece for piece in _CHUNK_BOUNDARY.split(text) if piece]


class _EmbeddedBase:
    # (v5) Structured output (``response_format``) is answered as JSON of its schema.
    takes_response_format = True

    def __init__(
        self,
        *,
        chunk_delay: float | None = None,
        fail: bool = False,
        fail_after_chunks: int | None = None,
    ) -> None:
        """``chunk_delay`` (seconds, before each streamed chunk) simulates a slow model
        (None: ``CONVO_EMBEDDED_CHUNK_DELAY_MS``, read on each stream);
        ``fail`` makes every call raise ProviderError; ``fail_after_chunks`` makes
        ``stream`` raise after yielding that many chunks (a mid-stream outage)."""
        self.chunk_delay = chunk_delay
        self.fail = fail
        self.fail_after_chunks = fail_after_chunks

    def _check_fail(self) -> None:
        if self.fail:
            raise ProviderError("The embedded model provider is configured to fail.")

    def complete(self, prompt: Prompt) -> Completion:
        raise NotImplementedError

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """Yield ``complete(prompt).text`` in small pieces, in order."""
        self._check_fail()
        yield from self._pieces(self.complete(prompt).text)

    def _pieces(self, text: str) -> Iterator[str]:
        for index, piece in enumerate(split_chunks(text)):
            if self.fail_after_chunks is not None and index >= self.fail_after_chunks:
                raise ProviderError("The embedded model provider failed mid-stream.")
            delay = chunk_delay_from_env() if self.chunk_delay is None else self.chunk_delay
            if delay > 0:
                time.sleep(delay)
            yield piece

    def _plan(
        self, prompt: Prompt, rounds: Sequence[ToolRound], tools: Sequence[ToolDefinition]
    ) -> tuple[ToolRequest, ...]:
        """The tools this model would call for the prompt's input (none by default)."""
        return ()

    def _answer(self, prompt: Prompt, rounds: Sequence[ToolRound]) -> str:
        raise NotImplementedError

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
        """Call the tools the input names that were not called yet this turn (as
        ``choice`` allows); answer once there are none."""
        self._check_fail()
        if not final:
            planned = self._plan(prompt, rounds, tools)
            requests = planned_calls(planned, rounds, tools, choice, latest_input(prompt))
            if requests:
                return ModelStep("", requests, estimated_usage(prompt, ""))
        text = self._answer(prompt, rounds)
        if on_text is not None:
            for piece in self._pieces(text):
                on_text(piece)
        return ModelStep(text, usage=estimated_usage(prompt, text))


class EmbeddedChatProvider(_EmbeddedBase):
    """Generative provider: echoes the input verbatim and describes its memory. Offered
    tools (the app's own, v4), it calls those whose name occurs in the input."""

    def complete(self, prompt: Prompt) -> Completion:
        self._check_fail()
        text = self._answer(prompt, ())
        return Completion(text=text, usage=estimated_usage(prompt, text))

    def _plan(
        self, prompt: Prompt, rounds: Sequence[ToolRound], tools: Sequence[ToolDefinition]
    ) -> tuple[ToolRequest, ...]:
        return named_calls(latest_input(prompt), tools)

    def _answer(self, prompt: Prompt, rounds: Sequence[ToolRound]) -> str:
        parts = [f'You said: "{latest_input(prompt)}".', *_described(rounds), memory_note(prompt)]
        return shaped_answer(prompt, " ".join(parts), latest_input(prompt))


# --- the agent ----------------------------------------------------------------------

BUILTIN_TOOLS: tuple[str, ...] = ("lookup_order", "search_kb")
# How much of a webhook's result the agent's answer quotes; the digest keeps more.
QUOTE_CHARS = 80
DIGEST_QUOTE_CHARS = 500


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """The start of ``text`` on one line, marked when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def plan_tool_requests(text: str, tools: Sequence[ToolDefinition]) -> tuple[ToolRequest, ...]:
    """The embedded agent's deterministic plan for an input: each offered webhook tool
    (or app tool, v4) whose name occurs in it (case-insensitively), once each in order of
    occurrence (``named_calls``); then ``lookup_order`` when the input holds
    an order number (3-12 digits), else ``search_kb``, if offered."""
    named = named_calls(text, [tool for tool in tools if tool.name not in BUILTIN_TOOLS])
    planned: list[tuple[str, dict[str, Any]]] = [(r.name, dict(r.input)) for r in named]
    offered = {tool.name for tool in tools}
    match = _ORDER_NUMBER.search(text)
    if match and "lookup_order" in offered:
        planned.append(("lookup_order", {"orderId": match.group(1)}))
    elif "search_kb" in offered:
        planned.append(("search_kb", {"query": text.strip()[:200]}))
    return tuple(
        ToolRequest(f"call_{index + 1}", name, tool_input)
        for index, (name, tool_input) in enumerate(planned)
    )


def named_calls(text: str, tools: Sequence[ToolDefinition]) -> tuple[ToolRequest, ...]:
    """A call of each tool whose name occurs in ``text`` (case-insensitively), in order
    of occurrence, with ``tool_arguments`` (the app's tools: of their schema; webhooks:
    ``{"query": <text>}``)."""
    folded = text.casefold()
    found = sorted(
        (folded.find(tool.name.casefold()), position, tool)
        for position, tool in enumerate(tools)
        if tool.name.casefold() in folded
    )
    return tuple(
        ToolRequest(f"call_{index + 1}", tool.name, tool_arguments(tool, text))
        for index, (_, _, tool) in enumerate(found)
    )


def planned_calls(
    planned: Sequence[ToolRequest],
    rounds: Sequence[ToolRound],
    tools: Sequence[ToolDefinition],
    choice: ToolChoice,
    text: str = "",
) -> tuple[ToolRequest, ...]:
    """What a step calls of ``planned``: the calls of tools not called yet this turn, as
    ``choice`` asks (a named function: only it; ``required``: the first tool when none
    was planned; ``parallel`` false: one call), a forced call made with the arguments
    ``tool_arguments`` gives for the input ``text``; ids unique within the turn."""
    called = {request.name for round_ in rounds for request in round_.requests}
    if choice.mode == "function":
        named = [r for r in planned if r.name == choice.function]
        forced = [t for t in tools if t.name == choice.function][:1]
        planned = named or [ToolRequest("call_1", t.name, tool_arguments(t, text)) for t in forced]
    elif choice.mode == "required" and not planned and tools:
        planned = [ToolRequest("call_1", tools[0].name, tool_arguments(tools[0], text))]
    todo = [r for r in planned if r.name not in called]
    if choice.parallel is False:
        todo = todo[:1]
    step = f"{len(rounds) + 1}_" if rounds else ""
    return tuple(replace(r, call_id=f"call_{step}{i + 1}") for i, r in enumerate(todo))


def _described(rounds: Sequence[ToolRound]) -> list[str]:
    """A sentence per tool call of the turn, quoting what it returned."""
    return [
        _describe(request, reply)
        for round_ in rounds
        for request, reply in zip(round_.requests, round_.replies, strict=False)
    ]


def _describe(request: ToolRequest, reply: ToolReply) -> str:
    """One sentence about a tool call, quoting what it returned."""
    if reply.is_error:
        # The loop marks an unsuccessful result "[error] ..." or "[timeout] ...".
        marked = _STATUS_MARK.match(reply.output)
        what = "timed out" if marked and marked.group(1) == "timeout" else "failed"
        detail = reply.output[marked.end() :] if marked else reply.output
        return f"I tried {request.name}, but it {what}: {quote(detail)}."
    if request.name in BUILTIN_TOOLS:
        try:
            result = json.loads(reply.output)
            fact = order_fact(result) if request.name == "lookup_order" else kb_fact(result)
        except (ValueError, KeyError, TypeError):
            fact = quote(reply.output)
        return f"I used {request.name}: {fact.rstrip('.')}."
    return f'I used {request.name}: "{quote(reply.output)}".'


def _replayed_tool_results(prompt: Prompt) -> list[str]:
    """The bodies of the prompt's tool-result fences (only real ones: with the nonce)."""
    if not prompt.fence_nonce:
        return []
    nonce = re.escape(prompt.fence_nonce)
    fence = re.compile(rf'<data-{nonce} kind="tool-results"[^>]*>\n(.*?)\n</data-{nonce}>', re.S)
    return fence.findall(_prompt_text(prompt))


class EmbeddedAgentProvider(_EmbeddedBase):
    """The embedded agent: deterministic and offline, with the tool loop's interface
    (``step``). On a turn's first step it asks for the tools ``plan_tool_requests``
    picks; then it answers with the input verbatim, a sentence per tool call quoting
    what it returned, and what it remembers (quoting the tool results replayed from
    earlier turns, so a follow-up can be answered from a digest).

    ``complete`` (no tool loop) runs the built-in tools in ``tools`` itself."""

    def __init__(
        self,
        tools: Sequence[str] | None = None,
        *,
        chunk_delay: float | None = None,
        fail: bool = False,
        fail_after_chunks: int | None = None,
    ) -> None:
        super().__init__(chunk_delay=chunk_delay, fail=fail, fail_after_chunks=fail_after_chunks)
        self.tools: tuple[str, ...] = tuple(tools) if tools else BUILTIN_TOOLS

    def _plan(
        self, prompt: Prompt, rounds: Sequence[ToolRound], tools: Sequence[ToolDefinition]
    ) -> tuple[ToolRequest, ...]:
        return plan_tool_requests(latest_input(prompt), tools)

    def _answer(self, prompt: Prompt, rounds: Sequence[ToolRound]) -> str:
        parts = [f'You said: "{latest_input(prompt)}".', *_described(rounds)]
        note = memory_note(prompt)
        earlier = _replayed_tool_results(prompt)
        if earlier:
            note += " They say: " + " | ".join(quote(t, DIGEST_QUOTE_CHARS) for t in earlier)
        parts.append(note)
        return shaped_answer(prompt, " ".join(parts), latest_input(prompt))

    def complete(self, prompt: Prompt) -> Completion:
        """One turn without a tool loop: the built-in tools in ``tools`` run here."""
        self._check_fail()
        offered = [BUILTIN_DEFINITIONS[name] for name in self.tools if name in BUILTIN_DEFINITIONS]
        requests = plan_tool_requests(latest_input(prompt), offered)
        if not requests:
            text = self._answer(prompt, ())
            return Completion(text=text, usage=estimated_usage(prompt, text))
        calls: list[ToolCall] = []
        replies: list[ToolReply] = []
        for request in requests:
            started_at = iso(utc_now())
            began = time.perf_counter()
            output = json.dumps(run_builtin(request.name, request.input, None), sort_keys=True)
            duration_ms = round((time.perf_counter() - began) * 1000, 3)
            calls.append(ToolCall(request.name, request.input, output, started_at, duration_ms))
            replies.append(ToolReply(request.call_id, request.name, output))
        text = self._answer(prompt, (ToolRound("", requests, tuple(replies)),))
        return Completion(text, tuple(calls), estimated_usage(prompt, text))
