"""Embedded providers: deterministic, no network. The default of the local runtime.

The answer always contains the user's latest input verbatim (contract), followed by a
short note that shows what the model was given (how many earlier messages, whether a
summary or tool results were in the prompt), so tests and demos can see memory at work.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from convo_memory.domain.errors import ProviderError
from convo_memory.domain.models import iso, utc_now
from convo_memory.domain.prompt import Prompt
from convo_memory.ports import Completion, ToolCall

BUILTIN_TOOLS: tuple[str, ...] = ("lookup_order", "search_kb")

_FENCE_OPEN = re.compile(r'<data-([0-9A-Za-z]+) kind="([a-z-]+)"')
# Whitespace-delimited pieces: each chunk is a word plus the whitespace that follows it.
_CHUNK_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")
_ORDER_NUMBER = re.compile(r"(?<!\d)(\d{3,12})(?!\d)")
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
    """The current user input: the last message of the prompt."""
    if prompt.messages:
        return prompt.messages[-1].content
    return prompt.user_input


def _fenced_kinds(prompt: Prompt) -> Counter[str]:
    """Count the data blocks (summary, tool-results) the system prompt carries. With a
    nonce only real fences count: the fence strips the nonce from the data it wraps."""
    kinds: Counter[str] = Counter()
    for nonce, kind in _FENCE_OPEN.findall(prompt.system):
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
    return note


def split_chunks(text: str) -> list[str]:
    """Split into word-ish pieces whose concatenation is exactly ``text``."""
    return [piece for piece in _CHUNK_BOUNDARY.split(text) if piece]


class _EmbeddedBase:
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
        text = self.complete(prompt).text
        for index, piece in enumerate(split_chunks(text)):
            if self.fail_after_chunks is not None and index >= self.fail_after_chunks:
                raise ProviderError("The embedded model provider failed mid-stream.")
            delay = chunk_delay_from_env() if self.chunk_delay is None else self.chunk_delay
            if delay > 0:
                time.sleep(delay)
            yield piece


class EmbeddedChatProvider(_EmbeddedBase):
    """Generative provider: echoes the input verbatim and describes its memory."""

    def complete(self, prompt: Prompt) -> Completion:
        self._check_fail()
        return Completion(text=f'You said: "{latest_input(prompt)}". {memory_note(prompt)}')


# --- agent tools --------------------------------------------------------------------

_ORDER_STATES: tuple[tuple[str, int | None], ...] = (
    # (status, base ETA in days; None once delivered)
    ("processing", 3),
    ("shipped", 1),
    ("out for delivery", 0),
    ("delivered", None),
)

_KB_ARTICLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Returns and refunds", "Items can be returned within 30 days.", ("return", "refund")),
    ("Shipping times", "Standard shipping takes 3-5 business days.", ("ship", "deliver")),
    ("Account access", "Reset your password from the sign-in page.", ("password", "login")),
    ("Billing", "Invoices are emailed on the first day of each month.", ("bill", "invoice")),
)


def lookup_order(order_id: str) -> tuple[dict[str, Any], str]:
    """Deterministic order status: the status and ETA are derived from the number."""
    number = int(order_id)
    status, base_eta = _ORDER_STATES[number % len(_ORDER_STATES)]
    eta_days = None if base_eta is None else base_eta + number % 3
    result: dict[str, Any] = {"orderId": order_id, "status": status, "etaDays": eta_days}
    if eta_days is None:
        fact = f"order {order_id} is {status}"
    elif eta_days == 0:
        fact = f"order {order_id} is {status}, arriving today"
    else:
        fact = f"order {order_id} is {status}, arriving in {_plural(eta_days, 'day')}"
    return result, fact


def search_kb(query: str) -> tuple[dict[str, Any], str]:
    """Deterministic knowledge-base search: a keyword match, else a hash of the query."""
    lowered = query.casefold()
    index = next(
        (i for i, (_, _, keys) in enumerate(_KB_ARTICLES) if any(k in lowered for k in keys)),
        None,
    )
    if index is None:
        digest = hashlib.sha256(query.encode("utf-8")).digest()
        index = digest[0] % len(_KB_ARTICLES)
    title, answer, _ = _KB_ARTICLES[index]
    result = {
        "query": query[:200],
        "articleId": f"KB-{1001 + index}",
        "title": title,
        "answer": answer,
    }
    return result, f'the article "{title}" says: {answer}'


class EmbeddedAgentProvider(_EmbeddedBase):
    """Agent provider with deterministic built-in tools that need no network.

    ``lookup_order`` runs when the input contains a number of 3-12 digits, otherwise
    ``search_kb`` runs. Only tools in ``tools`` are used when it is given and non-empty
    (declared names without a built-in implementation are ignored); with no declared
    tools both built-ins are available.
    """

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

    def _plan(self, text: str) -> tuple[str, dict[str, Any], Callable[[], tuple[Any, str]]] | None:
        match = _ORDER_NUMBER.search(text)
        if match and "lookup_order" in self.tools:
            order_id = match.group(1)
            return "lookup_order", {"orderId": order_id}, lambda: lookup_order(order_id)
        if "search_kb" in self.tools:
            query = text.strip()
            return "search_kb", {"query": query[:200]}, lambda: search_kb(query)
        return None

    def complete(self, prompt: Prompt) -> Completion:
        self._check_fail()
        user_input = latest_input(prompt)
        text = f'You said: "{user_input}". '
        calls: tuple[ToolCall, ...] = ()
        plan = self._plan(user_input)
        if plan is not None:
            name, tool_input, run = plan
            started_at = iso(utc_now())
            began = time.perf_counter()
            result, fact = run()
            duration_ms = round((time.perf_counter() - began) * 1000, 3)
            output = json.dumps(result, sort_keys=True)
            calls = (ToolCall(name, tool_input, output, started_at, duration_ms),)
            text += f"I used {name}: {fact.rstrip('.')}. "
        text += memory_note(prompt)
        return Completion(text=text, tool_calls=calls)
