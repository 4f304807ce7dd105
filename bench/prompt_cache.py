"""Figure 15: prompts a provider can cache (``replay.alignment``), at human pace.

One conversation of ``turns`` turns per alignment (1, then 10), served through the
in-process stack (each turn's summary job runs before the next turn, as at any human
pace) on a fake OpenAI-compatible model on 127.0.0.1 that records every prompt, with the
default replay window (20 messages, 12,000 characters). A turn's question is about 200
characters and its answer about 1,200 (a chat answer of some 300 tokens). Tokens are
characters / 4, as in figure 8. Per alignment:

- the share of the turns' input tokens that repeat the previous turn's prompt: the
  longest common prefix of the two prompts (system text, then every message), which is
  what any provider's prefix cache can reuse at best; and the turns that extend it;
- the serving function's log bytes per turn with the model reporting usage (the turn's
  line then carries its tokens), against figure 10's budget.

Then, for each alignment, at two human paces (a turn a minute; and a turn a minute with
a 7-minute pause after every 10th turn) and with both cache TTLs (5 minutes, 1 hour),
what Bedrock would bill, replaying the cache points where the adapter puts them (after
the system text; after the last replayed message when the next turn's window keeps its
start; after a summarizer call's system text): a request reads the longest prefix an
earlier request wrote at one of its cache points and that was used within the TTL (a
read keeps it alive), and writes the tokens from there to its last cache point, when
that prefix reaches the model's minimum (2,048 tokens for Claude 3.5 Haiku). Time is
simulated: each request is billed at its turn's time on the pace's clock (a summary
call a few seconds after its turn); nothing sleeps. The model's input cost per million
turns (turns and summaries) is priced at the reference model's published prices
(bench/prices.py: input, cache read, and the cache write at each TTL's premium), next to
the same prompts without any caching.
"""

from __future__ import annotations

import functools
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
    MODEL_USD_PER_MILLION_CACHE_WRITE_1H_TOKENS,
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
MINUTE = 60.0
# A turn's summary job runs this long after the turn (SUMMARY_DELAY_SECONDS).
SUMMARY_AFTER_SECONDS = 2.0
# A cache TTL: its lifetime in seconds and the price of a write, per million tokens.
TTLS: dict[str, tuple[float, float]] = {
    "5m": (5 * MINUTE, MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS),
    "1h": (60 * MINUTE, MODEL_USD_PER_MILLION_CACHE_WRITE_1H_TOKENS),
}
# The figure's bound: at alignment 10, a turn a minute, Bedrock's default TTL.
SAVING_BOUND = 0.40
BOUND_ROW = (10, "a turn a minute", "5m")


def a_turn_a_minute(turn: int) -> float:
    """When turn ``turn`` (0-based) is sent, in seconds from the first."""
    return MINUTE * turn


def with_pauses(turn: int, phase: int = 0) -> float:
    """A turn a minute, and 7 minutes before turns ``phase``, ``phase + 10``, ... (never
    before the first)."""
    pauses = sum(1 for later in range(1, turn + 1) if later % 10 == phase)
    return MINUTE * turn + (7 * MINUTE - MINUTE) * pauses


# A pace: the clocks it is billed at (the result is their mean). A pause every 10 turns
# falls at each of the ten places it can within the window's steps, in turn.
PACES: dict[str, tuple[Callable[[int], float], ...]] = {
    "a turn a minute": (a_turn_a_minute,),
    "7-minute pause every 10 turns": tuple(
        functools.partial(with_pauses, phase=phase) for phase in range(10)
    ),
}


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


def summary_points(messages: Sequence[dict[str, Any]]) -> list[int]:
    """A summarizer call's cache point: after its system text (stable across calls)."""
    first = messages[0] if messages else {}
    return [len(str(first.get("content") or ""))] if first.get("role") == "system" else []


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
    """The prefixes earlier requests wrote at their cache points (by length and hash),
    with when each was last used: a prefix unused for ``ttl`` seconds is gone."""

    min_chars: int
    ttl: float = float("inf")
    written: dict[int, dict[str, float]] = field(default_factory=dict)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def _alive(self, n: int, text: str, now: float) -> bool:
        used = self.written.get(n, {}).get(self._key(text[:n]))
        return used is not None and now - used <= self.ttl

    def bill(self, text: str, points: Sequence[int], now: float = 0.0) -> tuple[int, int, int]:
        """(characters read from the cache, written to it, neither) for one request at
        ``now`` (seconds); what it reads or writes lives ``ttl`` from now."""
        read = max(
            (n for n in self.written if n <= len(text) and self._alive(n, text, now)),
            default=0,
        )
        if read:
            self.written[read][self._key(text[:read])] = now  # a read keeps it alive
        last = max((p for p in points if p >= self.min_chars), default=0)
        write = last - read if last > read else 0
        for point in points:
            if point >= self.min_chars:
                self.written.setdefault(point, {})[self._key(text[:point])] = now
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


@dataclass(frozen=True)
class Sent:
    """One request the model received: the turn it belongs to (a summary call: the turn
    whose job made it), its text and where the adapter puts its cache points."""

    turn: int
    summary: bool
    text: str
    points: tuple[int, ...]


@dataclass
class Tally:
    turns: int = 0
    input_chars: int = 0
    repeated_chars: int = 0
    output_chars: int = 0
    summary_input_chars: int = 0
    summary_output_chars: int = 0
    log_bytes: int = 0
    extending_turns: int = 0
    sent: list[Sent] = field(default_factory=list)

    def result(self, alignment: int) -> dict[str, Any]:
        return {
            "alignment": alignment,
            "turns": self.turns,
            "inputTokensPerTurn": self.input_chars / CHARS_PER_TOKEN / self.turns,
            "repeatedShare": self.repeated_chars / self.input_chars,
            "extendingShare": self.extending_turns / max(1, self.turns - 1),
            "logBytesPerTurn": self.log_bytes / self.turns,
            "outputUsd": self._usd(
                self.output_chars + self.summary_output_chars, MODEL_USD_PER_MILLION_OUTPUT_TOKENS
            ),
        }

    def _usd(self, chars: float, usd_per_million_tokens: float) -> float:
        """USD per million turns for ``chars`` of this conversation's tokens."""
        return chars / CHARS_PER_TOKEN * usd_per_million_tokens / self.turns

    def billed(self, pace: str, ttl: str) -> dict[str, Any]:
        """What Bedrock bills this conversation's input at ``pace`` with cache points of
        ``ttl`` (the mean over the pace's clocks): the turns' shares read and written,
        and the input's USD per million turns with and without caching, the turns'
        prompts and all input (with the summaries' calls)."""
        lifetime, write_price = TTLS[ttl]
        clocks = PACES[pace]
        read = write = summary_cached = 0.0
        for clock in clocks:
            cache = BedrockCache(MODEL_MIN_CACHED_PREFIX_TOKENS * CHARS_PER_TOKEN, lifetime)
            for request in self.sent:
                now = clock(request.turn) + (SUMMARY_AFTER_SECONDS if request.summary else 0)
                r, w, _ = cache.bill(request.text, request.points, now)
                if request.summary:
                    summary_cached += (r + w) / len(clocks)
                else:
                    read, write = read + r / len(clocks), write + w / len(clocks)
        turns_plain = self._usd(self.input_chars, MODEL_USD_PER_MILLION_INPUT_TOKENS)
        turns_cached = (
            self._usd(self.input_chars - read - write, MODEL_USD_PER_MILLION_INPUT_TOKENS)
            + self._usd(read, MODEL_USD_PER_MILLION_CACHE_READ_TOKENS)
            + self._usd(write, write_price)
        )
        # The summaries' calls are billed too (their only stable part, the instructions,
        # is below the minimum prefix: none of it is cached, so they cost the same).
        summaries = self._usd(self.summary_input_chars, MODEL_USD_PER_MILLION_INPUT_TOKENS)
        return {
            "pace": pace,
            "ttl": ttl,
            "cacheReadShare": read / self.input_chars,
            "cacheWriteShare": write / self.input_chars,
            "inputUsdUncached": turns_plain,
            "inputUsdCached": turns_cached,
            "saving": 1 - turns_cached / turns_plain,
            "summaryInputUsd": summaries,
            "summaryCachedChars": summary_cached,
            "allSaving": 1 - (turns_cached + summaries) / (turns_plain + summaries),
        }


def conversation(
    turns: int, alignment: int, progress: Callable[[str], None] | None = None
) -> Tally:
    """One conversation at ``alignment``: every request the model received (with where
    the adapter puts its cache points), and what the turns' prompts repeat."""
    from tests.support.summary_jobs import SummaryJobs

    model = FakeModel()
    tally = Tally()
    with model_session(
        "bench-cache", model.respond, usage_for=model.usage, replay={"alignment": alignment}
    ) as (server, api, token, session_id):
        jobs = SummaryJobs(api)
        ledger = FunctionLedger().attach(api.registry)
        previous = ""
        seen = 0
        # A turn's points are known once the next one shows whether its window kept its
        # start (the adapter marks the replayed messages then: ``Prompt.replay_reused``).
        pending: tuple[int, str, list[dict[str, Any]], int] | None = None

        def keep(reused: bool) -> None:
            assert pending is not None
            index, text, messages, _ = pending
            tally.sent.append(Sent(index, False, text, tuple(cache_points(messages, reused))))

        for i in range(turns):
            question = f"Turn {i + 1}: and what about the other order, can you check it?"
            ledger.reset()
            answer = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": question.ljust(QUESTION_CHARS, ".")},
            )
            if answer.status != 200 or not answer.body["recorded"]:
                raise RuntimeError(f"turn {i + 1} failed: {answer.status} {answer.body}")
            tally.log_bytes += sum(use.log_bytes for use in ledger.reset().values())
            omitted = answer.body["context"]["omittedMessages"]
            jobs.run_pending()
            for request in server.requests[seen:]:
                messages = request.body["messages"]
                text = prompt_text(messages)
                if SUMMARY_MARK in messages[0]["content"]:
                    tally.summary_input_chars += len(text)
                    tally.summary_output_chars += 900
                    tally.sent.append(Sent(i, True, text, tuple(summary_points(messages))))
                    continue
                tally.turns += 1
                tally.input_chars += len(text)
                tally.output_chars += ANSWER_CHARS
                shared = common_prefix(previous, text)
                tally.repeated_chars += shared
                tally.extending_turns += shared == len(previous) > 0
                if pending is not None:
                    keep(pending[3] == omitted)
                pending = (i, text, messages, omitted)
                previous = text
            seen = len(server.requests)
            if progress and (i + 1) % 50 == 0:
                progress(f"prompt cache, alignment {alignment}: {i + 1} of {turns} turns")
        if pending is not None:
            keep(False)
    # Turns and their summary calls in the order the model received them.
    tally.sent.sort(key=lambda request: (request.turn, request.summary))
    return tally


def prompt_cache_figure(
    turns: int = 200,
    progress: Callable[[str], None] | None = None,
    today_usd: float | None = None,
) -> dict[str, Any]:
    """Figure 15: the conversation at each alignment, billed at each pace and TTL, and
    today's figure (figure 10's model line, when it was measured) beside them."""
    rows, billed = [], []
    for alignment in ALIGNMENTS:
        tally = conversation(turns, alignment, progress)
        rows.append(tally.result(alignment))
        billed += [
            {"alignment": alignment, **tally.billed(pace, ttl)} for pace in PACES for ttl in TTLS
        ]
    return {
        "turns": turns,
        "questionChars": QUESTION_CHARS,
        "answerChars": ANSWER_CHARS,
        "rows": rows,
        "billed": billed,
        "savingBound": SAVING_BOUND,
        "boundRow": list(BOUND_ROW),
        "figure10ModelUsd": today_usd,
        "logBytesBudget": LOG_BYTES_BUDGET,
        "prices": {
            "input": MODEL_USD_PER_MILLION_INPUT_TOKENS,
            "output": MODEL_USD_PER_MILLION_OUTPUT_TOKENS,
            "cacheWrite": MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS,
            "cacheWrite1h": MODEL_USD_PER_MILLION_CACHE_WRITE_1H_TOKENS,
            "cacheRead": MODEL_USD_PER_MILLION_CACHE_READ_TOKENS,
            "minPrefixTokens": MODEL_MIN_CACHED_PREFIX_TOKENS,
        },
    }


def _billed(figure: dict[str, Any], alignment: int, pace: str, ttl: str) -> dict[str, Any]:
    found = [
        b
        for b in figure["billed"]
        if (b["alignment"], b["pace"], b["ttl"]) == (alignment, pace, ttl)
    ]
    return found[0] if found else {}


def bound_verdict(figure: dict[str, Any]) -> str:
    """The bound row's saving on the turns' input (the bound), and on all model input
    (with the summaries' calls) and against the default window without a cache."""
    alignment, pace, ttl = figure["boundRow"]
    row = _billed(figure, alignment, pace, ttl)
    if not row:
        return "n/a"
    verdict = "PASS" if row["saving"] >= figure["savingBound"] else "FAIL"
    line = (
        f"alignment {alignment}, {pace}, TTL {ttl}: the turns' input costs {row['saving']:.0%}"
        f" less than without caching: {verdict} (at least {figure['savingBound']:.0%});"
        f" all model input, with the summaries' calls, {row['allSaving']:.0%} less"
    )
    plain = _billed(figure, 1, pace, ttl)
    if plain:
        today = plain["inputUsdUncached"] + plain["summaryInputUsd"]
        cached = row["inputUsdCached"] + row["summaryInputUsd"]
        line += f", and {1 - cached / today:.0%} less than the default window without caching"
    return line


def _share(value: float) -> str:
    """A saving as a percentage (a rounding's sign dropped: never "-0%")."""
    return f"{value:.0%}" if abs(value) >= 0.005 else "0%"


def _by_alignment(usd: dict[int, float]) -> str:
    """USD per M turns, once when every alignment's is the same."""
    texts = {alignment: f"${value:,.0f}" for alignment, value in usd.items()}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return ", ".join(f"{text} (alignment {alignment})" for alignment, text in texts.items())


def render_prompt_cache(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    """Figure 15 as text (``table`` and ``title`` from bench.render)."""
    rows = [
        [
            str(row["alignment"]),
            f"{row['inputTokensPerTurn']:,.0f}",
            f"{row['repeatedShare']:.0%}",
            f"{row['extendingShare']:.0%}",
            f"{row['logBytesPerTurn']:,.0f}",
        ]
        for row in figure["rows"]
    ]
    billed = [
        [
            str(b["alignment"]),
            b["pace"],
            b["ttl"],
            f"{b['cacheReadShare']:.0%} / {b['cacheWriteShare']:.0%}",
            f"${b['inputUsdUncached']:,.0f}",
            f"${b['inputUsdCached']:,.0f}",
            _share(b["saving"]),
            _share(b["allSaving"]),
        ]
        for b in figure["billed"]
    ]
    summaries = _by_alignment({b["alignment"]: b["summaryInputUsd"] for b in figure["billed"]})
    prices = figure["prices"]
    today = figure.get("figure10ModelUsd")
    over = [
        r["alignment"] for r in figure["rows"] if r["logBytesPerTurn"] > figure["logBytesBudget"]
    ]
    output = _by_alignment({r["alignment"]: r["outputUsd"] for r in figure["rows"]})
    lines = [
        title,
        f"one {figure['turns']}-turn conversation per alignment (questions"
        f" ~{figure['questionChars']} chars, answers ~{figure['answerChars']}), replay"
        " {maxMessages: 20, maxChars: 12000} and the alignment shown; tokens = chars / 4",
        table(
            [
                "alignment",
                "input tok/turn",
                "repeats prev prefix",
                "turns extending prev",
                "turn log bytes",
            ],
            rows,
        ),
        "",
        "What Bedrock bills for the model's input at the adapter's cache points (minimum"
        f" prefix {prices['minPrefixTokens']:,} tokens), at two human paces (simulated"
        " clocks) and each cache TTL, per million turns:",
        table(
            [
                "alignment",
                "pace",
                "TTL",
                "turns' input read / written",
                "turns' input, no cache",
                "with cache",
                "saving",
                "all input saving",
            ],
            billed,
        ),
        bound_verdict(figure),
        "repeats prev prefix: the share of the turns' input tokens that begin the previous"
        " turn's prompt (what a prefix cache can reuse at best); read / written: the share"
        " of the turns' input read from and written to the cache; a prefix unused for its"
        " TTL is gone (a 7-minute pause outlives a 5-minute TTL, not an hour's; the pause"
        " falls at each of the ten places it can within the window's steps, in turn, and"
        " the row is their mean).",
        f"all input: with the summaries' calls ({summaries} per M turns), never cached:"
        " their only stable part, the summarizer's instructions, is below the minimum"
        " prefix.",
        f"prices (Claude 3.5 Haiku on Bedrock): input ${prices['input']:.2f}, cache write"
        f" ${prices['cacheWrite']:.2f} (5m) or ${prices['cacheWrite1h']:.2f} (1h), cache read"
        f" ${prices['cacheRead']:.2f} per M tokens; output ${prices['output']:.2f}, the same"
        f" with or without a cache: {output} per M turns.",
    ]
    if today is not None:
        lines.append(
            f"today's figure (figure 10: figure 8's conversation of ~120/400-char messages,"
            f" no cache, input and output): ${today:,.2f} per M turns"
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
