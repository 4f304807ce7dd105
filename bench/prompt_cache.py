"""Figure 15: prompts a provider can cache (``replay.alignment``).

One conversation of ``turns`` turns, served through the in-process stack at a human pace
(each turn's summary job runs before the next turn) on a fake OpenAI-compatible model on
127.0.0.1 that records every prompt, with the default replay window (20 messages, 12,000
characters) and ``alignment`` 1, then 10. A turn's question is about 200 characters and
its answer about 1,200 (a chat answer of some 300 tokens). Tokens are characters / 4, as
in figure 8. Per setting:

- the share of the turns' input tokens that repeat the previous turn's prompt: the
  longest common prefix of the two prompts (system text, then every message), which is
  what any provider's prefix cache can reuse at best;
- what Bedrock would bill, replaying the cache points where the adapter puts them (after
  the system text, and after the last replayed message when the next turn's window keeps
  its start): a prompt reads the longest prefix an earlier request wrote at one of its
  cache points, and writes the tokens from there to its last cache point, when that
  prefix reaches the model's minimum (2,048 tokens for Claude 3.5 Haiku). Turns are
  assumed to come within the cache's 5-minute lifetime;
- the model's cost per million turns at the reference model's published prices
  (bench/prices.py: input, output, cache write and cache read), the summary's model calls
  included (they are never cached), next to the same prompts without any caching: what
  figure 10 reports today;
- the serving function's log bytes per turn with the model reporting usage (the turn's
  line then carries its tokens), against figure 10's budget.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.costs import LOG_BYTES_BUDGET, FunctionLedger
from bench.model_session import model_session
from bench.prices import (
    MODEL_MIN_CACHED_PREFIX_TOKENS,
    MODEL_USD_PER_MILLION_CACHE_READ_TOKENS,
    MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS,
    MODEL_USD_PER_MILLION_INPUT_TOKENS,
    MODEL_USD_PER_MILLION_OUTPUT_TOKENS,
)

ROOT = Path(__file__).resolve().parent.parent
CHARS_PER_TOKEN = 4
QUESTION_CHARS = 200
ANSWER_CHARS = 1_200
ALIGNMENTS = (1, 10)
SUMMARY_MARK = "rolling summary of a conversation"
# OpenAI's automatic caching: prefixes of at least 1,024 tokens, in steps of 128.
OPENAI_MIN_TOKENS, OPENAI_STEP_TOKENS = 1_024, 128


def prompt_text(messages: Sequence[dict[str, Any]]) -> str:
    """What the model reads, in order (the system text first)."""
    return "".join(str(message.get("content") or "") for message in messages)


def cache_points(messages: Sequence[dict[str, Any]], replay_reused: bool) -> list[int]:
    """Where the Bedrock adapter puts its cache points, as offsets into ``prompt_text``:
    after the system text, and after the last replayed message (the last message is the
    input) when the next turn replays the same messages."""
    sizes = [len(str(message.get("content") or "")) for message in messages]
    points = [sizes[0]] if messages and messages[0].get("role") == "system" else []
    if replay_reused and len(messages) - len(points) > 1:
        points.append(sum(sizes[:-1]))
    return points


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    low, high = 0, n
    while low < high:  # the longest prefix is found by bisection (texts are long)
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass
class BedrockCache:
    """The prefixes earlier requests wrote at their cache points (by length and hash)."""

    min_chars: int
    written: dict[int, set[str]] = field(default_factory=dict)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def bill(self, text: str, points: Sequence[int]) -> tuple[int, int, int]:
        """(characters read from the cache, written to it, neither) for one request."""
        read = max(
            (
                n
                for n, keys in self.written.items()
                if n <= len(text) and self._key(text[:n]) in keys
            ),
            default=0,
        )
        last = max((p for p in points if p >= self.min_chars), default=0)
        write = last - read if last > read else 0
        for point in points:
            if point >= self.min_chars:
                self.written.setdefault(point, set()).add(self._key(text[:point]))
        return read, write, len(text) - read - write


def openai_cached_tokens(previous: str, text: str) -> int:
    """What OpenAI's automatic caching would report: the prefix shared with the previous
    prompt, in steps of 128 tokens from 1,024 on."""
    tokens = common_prefix(previous, text) // CHARS_PER_TOKEN
    if tokens < OPENAI_MIN_TOKENS:
        return 0
    return tokens - (tokens - OPENAI_MIN_TOKENS) % OPENAI_STEP_TOKENS


class FakeModel:
    """Answers turns with about ``ANSWER_CHARS`` characters and summaries with about 900,
    and reports usage as an OpenAI model with automatic prompt caching would."""

    def __init__(self) -> None:
        self.previous_turn = ""

    def respond(self, body: Any) -> str:
        messages = body["messages"]
        if SUMMARY_MARK in messages[0]["content"]:
            return ("The user is Ada Lovelace (ada@example.com); order 48213 is late. " * 15)[:900]
        question = messages[-1]["content"].splitlines()[-1]
        return (f"About '{question[:60]}': " + "here is what I found in your account. " * 40)[
            :ANSWER_CHARS
        ]

    def usage(self, body: Any) -> dict[str, Any]:
        text = prompt_text(body["messages"])
        cached = 0
        if SUMMARY_MARK not in body["messages"][0]["content"]:
            cached = openai_cached_tokens(self.previous_turn, text)
            self.previous_turn = text
        return {
            "prompt_tokens": len(text) // CHARS_PER_TOKEN,
            "completion_tokens": ANSWER_CHARS // CHARS_PER_TOKEN,
            "prompt_tokens_details": {"cached_tokens": cached},
        }


@dataclass
class Tally:
    turns: int = 0
    input_chars: int = 0
    repeated_chars: int = 0
    read_chars: int = 0
    write_chars: int = 0
    output_chars: int = 0
    summary_input_chars: int = 0
    summary_output_chars: int = 0
    log_bytes: int = 0
    extending_turns: int = 0

    def per_million(self, cached: bool) -> float:
        """The model's USD per million turns (turns and summary), with or without the
        prompt cache."""
        uncached = self.input_chars - (self.read_chars + self.write_chars if cached else 0)
        usd_per_char = 1 / CHARS_PER_TOKEN / 1e6
        turns = (
            uncached * MODEL_USD_PER_MILLION_INPUT_TOKENS
            + (self.read_chars * MODEL_USD_PER_MILLION_CACHE_READ_TOKENS if cached else 0)
            + (self.write_chars * MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS if cached else 0)
            + self.output_chars * MODEL_USD_PER_MILLION_OUTPUT_TOKENS
        )
        summary = (
            self.summary_input_chars * MODEL_USD_PER_MILLION_INPUT_TOKENS
            + self.summary_output_chars * MODEL_USD_PER_MILLION_OUTPUT_TOKENS
        )
        return (turns + summary) * usd_per_char / self.turns * 1e6

    def result(self, alignment: int) -> dict[str, Any]:
        return {
            "alignment": alignment,
            "turns": self.turns,
            "inputTokensPerTurn": self.input_chars / CHARS_PER_TOKEN / self.turns,
            "repeatedShare": self.repeated_chars / self.input_chars,
            "extendingShare": self.extending_turns / max(1, self.turns - 1),
            "cacheReadShare": self.read_chars / self.input_chars,
            "cacheWriteShare": self.write_chars / self.input_chars,
            "modelUsdCached": self.per_million(cached=True),
            "modelUsdUncached": self.per_million(cached=False),
            "logBytesPerTurn": self.log_bytes / self.turns,
        }


def conversation(
    turns: int, alignment: int, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """One conversation at ``alignment``: what its prompts repeat and what they cost."""
    from tests.support.summary_jobs import SummaryJobs

    model = FakeModel()
    tally = Tally()
    cache = BedrockCache(MODEL_MIN_CACHED_PREFIX_TOKENS * CHARS_PER_TOKEN)
    with model_session(
        "bench-cache", model.respond, usage_for=model.usage, replay={"alignment": alignment}
    ) as (server, api, token, session_id):
        jobs = SummaryJobs(api)
        ledger = FunctionLedger().attach(api.registry)
        previous = ""
        seen = 0
        # A turn is billed once the next one shows whether its window kept its start
        # (the adapter marks the replayed messages then: ``Prompt.replay_reused``).
        pending: tuple[str, list[dict[str, Any]], int] | None = None

        def bill(text: str, messages: list[dict[str, Any]], reused: bool) -> None:
            read, write, _ = cache.bill(text, cache_points(messages, reused))
            tally.read_chars += read
            tally.write_chars += write

        for i in range(1, turns + 1):
            question = f"Turn {i}: and what about the other order, can you check it?"
            ledger.reset()
            answer = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": question.ljust(QUESTION_CHARS, ".")},
            )
            if answer.status != 200 or not answer.body["recorded"]:
                raise RuntimeError(f"turn {i} failed: {answer.status} {answer.body}")
            tally.log_bytes += sum(use.log_bytes for use in ledger.reset().values())
            omitted = answer.body["context"]["omittedMessages"]
            jobs.run_pending()
            for request in server.requests[seen:]:
                messages = request.body["messages"]
                text = prompt_text(messages)
                if SUMMARY_MARK in messages[0]["content"]:
                    tally.summary_input_chars += len(text)
                    tally.summary_output_chars += 900
                    continue
                tally.turns += 1
                tally.input_chars += len(text)
                tally.output_chars += ANSWER_CHARS
                shared = common_prefix(previous, text)
                tally.repeated_chars += shared
                tally.extending_turns += shared == len(previous) > 0
                if pending is not None:
                    bill(pending[0], pending[1], pending[2] == omitted)
                pending = (text, messages, omitted)
                previous = text
            seen = len(server.requests)
            if progress and i % 50 == 0:
                progress(f"prompt cache, alignment {alignment}: {i} of {turns} turns")
        if pending is not None:
            bill(pending[0], pending[1], False)
    return tally.result(alignment)


def prompt_cache_figure(
    turns: int = 200,
    progress: Callable[[str], None] | None = None,
    today_usd: float | None = None,
) -> dict[str, Any]:
    """Figure 15: the conversation at each alignment, and today's figure (figure 10's
    model line, when it was measured) beside them."""
    rows = [conversation(turns, alignment, progress) for alignment in ALIGNMENTS]
    return {
        "turns": turns,
        "questionChars": QUESTION_CHARS,
        "answerChars": ANSWER_CHARS,
        "rows": rows,
        "figure10ModelUsd": today_usd,
        "logBytesBudget": LOG_BYTES_BUDGET,
        "prices": {
            "input": MODEL_USD_PER_MILLION_INPUT_TOKENS,
            "output": MODEL_USD_PER_MILLION_OUTPUT_TOKENS,
            "cacheWrite": MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS,
            "cacheRead": MODEL_USD_PER_MILLION_CACHE_READ_TOKENS,
            "minPrefixTokens": MODEL_MIN_CACHED_PREFIX_TOKENS,
        },
    }


def render_prompt_cache(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    """Figure 15 as text (``table`` and ``title`` from bench.render)."""
    rows = []
    for row in figure["rows"]:
        rows.append(
            [
                str(row["alignment"]),
                f"{row['inputTokensPerTurn']:,.0f}",
                f"{row['repeatedShare']:.0%}",
                f"{row['extendingShare']:.0%}",
                f"{row['cacheReadShare']:.0%} / {row['cacheWriteShare']:.0%}",
                f"${row['modelUsdUncached']:,.0f}",
                f"${row['modelUsdCached']:,.0f}",
                f"{row['logBytesPerTurn']:,.0f}",
            ]
        )
    prices = figure["prices"]
    today = figure.get("figure10ModelUsd")
    over = [
        r["alignment"] for r in figure["rows"] if r["logBytesPerTurn"] > figure["logBytesBudget"]
    ]
    lines = [
        title,
        f"one {figure['turns']}-turn conversation per row at a human pace (questions"
        f" ~{figure['questionChars']} chars, answers ~{figure['answerChars']}), replay"
        " {maxMessages: 20, maxChars: 12000} and the alignment shown; tokens = chars / 4",
        table(
            [
                "alignment",
                "input tok/turn",
                "repeats prev prefix",
                "turns extending prev",
                "Bedrock read / write",
                "model $/M turns, no cache",
                "with cache points",
                "turn log bytes",
            ],
            rows,
        ),
        "repeats prev prefix: the share of the turns' input tokens that begin the previous"
        " turn's prompt (what a prefix cache can reuse at best); Bedrock read / write: the"
        " share read from and written to the cache at the adapter's cache points, with a"
        f" minimum prefix of {prices['minPrefixTokens']:,} tokens and turns within the"
        " cache's 5-minute lifetime.",
        f"prices (Claude 3.5 Haiku on Bedrock): input ${prices['input']:.2f}, cache write"
        f" ${prices['cacheWrite']:.2f}, cache read ${prices['cacheRead']:.2f}, output"
        f" ${prices['output']:.2f} per M tokens; the summary's model calls are included and"
        " never cached.",
    ]
    if today is not None:
        lines.append(
            f"today's figure (figure 10: figure 8's conversation of ~120/400-char messages,"
            f" no cache): ${today:,.2f} per M turns"
        )
    verdict = (
        f"OVER the budget of {figure['logBytesBudget']:,} (alignment"
        f" {', '.join(str(a) for a in over)})"
        if over
        else f"within the budget of {figure['logBytesBudget']:,}"
    )
    lines.append(
        "turn log bytes: the serving function's own log per turn (its line and its metrics"
        " record) with the model reporting its usage, which figure 10's fake model does not;"
        f" figure 10's budget also covers the turn's share of the summary job: {verdict}"
    )
    return "\n".join(lines)
