"""Figure 15's arithmetic (prompts a provider can cache): where the adapter's cache points
fall, what a Bedrock-like cache reads and writes over simulated time, OpenAI's reported
cached tokens, the input's price per million turns at each TTL, and the rendered figure."""

from __future__ import annotations

from bench.prompt_cache import (
    PACES,
    BedrockCache,
    Sent,
    Tally,
    bound_verdict,
    cache_points,
    common_prefix,
    openai_cached_tokens,
    render_prompt_cache,
    summary_points,
    with_pauses,
)
from bench.stats import table

SYSTEM = {"role": "system", "content": "S" * 100}


def chat(*contents: str) -> list[dict[str, str]]:
    roles = ["user", "assistant"]
    return [SYSTEM, *({"role": roles[i % 2], "content": c} for i, c in enumerate(contents))]


def test_cache_points_follow_the_system_text_and_the_replayed_messages_when_reused() -> None:
    messages = chat("q1" * 10, "a1" * 20, "input")

    assert cache_points(messages, replay_reused=True) == [100, 100 + 20 + 40]
    assert cache_points(messages, replay_reused=False) == [100]
    assert cache_points(chat("input"), replay_reused=True) == [100]  # nothing replayed
    assert summary_points(messages) == [100]  # a summarizer call: its instructions


def test_a_cache_reads_the_longest_prefix_written_before_and_writes_up_to_its_last_point() -> None:
    cache = BedrockCache(min_chars=150)
    first = chat("q" * 100, "a" * 100, "x")
    text = "".join(m["content"] for m in first)

    # The system text alone is below the minimum: only the messages' point is written.
    assert cache.bill(text, cache_points(first, True)) == (0, 300, 1)
    second = [*first[:-1], {"role": "user", "content": "x"}, {"role": "assistant", "content": "b"}]
    second.append({"role": "user", "content": "y"})
    text2 = "".join(m["content"] for m in second)
    assert cache.bill(text2, cache_points(second, True)) == (300, 2, 1)
    # A prompt whose start changed reads nothing.
    other = [{"role": "system", "content": "T" * 100}, *second[1:]]
    assert cache.bill("".join(m["content"] for m in other), [100]) == (0, 0, len(text2))


def test_a_prefix_unused_for_its_ttl_is_gone_and_a_read_keeps_it_alive() -> None:
    cache = BedrockCache(min_chars=10, ttl=300)
    text = "p" * 50

    assert cache.bill(text, [40], now=0) == (0, 40, 10)
    assert cache.bill(text, [40], now=299)[0] == 40  # read: alive until 599 now
    assert cache.bill(text, [40], now=598)[0] == 40
    assert cache.bill(text, [40], now=899) == (0, 40, 10)  # 301 s unused: written again


def test_a_pause_every_ten_turns_falls_at_each_place_in_turn() -> None:
    steady, paused = PACES["a turn a minute"][0], PACES["7-minute pause every 10 turns"]

    assert [steady(t) for t in range(3)] == [0, 60, 120]
    assert len(paused) == 10
    gaps = [with_pauses(t + 1) - with_pauses(t) for t in range(25)]
    assert [t + 1 for t, gap in enumerate(gaps) if gap == 420] == [10, 20]
    assert set(gaps) == {60, 420}
    moved = [with_pauses(t + 1, phase=3) - with_pauses(t, phase=3) for t in range(25)]
    assert [t + 1 for t, gap in enumerate(moved) if gap == 420] == [3, 13, 23]


def test_openai_reports_a_shared_prefix_from_1024_tokens_in_steps_of_128() -> None:
    base = "p" * 4 * 2_000
    assert common_prefix(base, base + "more") == len(base)
    assert openai_cached_tokens(base, base + "more") == 1_024 + 7 * 128
    assert openai_cached_tokens(base[:4_000], base) == 0  # 1,000 tokens: below the minimum
    assert openai_cached_tokens("", base) == 0


def steady_tally() -> Tally:
    """Three turns of one window (each 9,000 characters more), then a summary call."""
    prefix = "s" * 9_000
    texts = [prefix * (n + 1) + "q" for n in range(3)]
    sent = [Sent(n, False, text, (len(text) - 1,) if n < 2 else ()) for n, text in enumerate(texts)]
    sent.append(Sent(2, True, "i" * 900 + "m" * 3_000, (900,)))
    return Tally(
        turns=3,
        input_chars=sum(len(t) for t in texts),
        summary_input_chars=3_900,
        sent=sent,
    )


def test_the_inputs_price_counts_the_write_premium_of_each_ttl() -> None:
    tally = steady_tally()
    five, hour = tally.billed("a turn a minute", "5m"), tally.billed("a turn a minute", "1h")

    # Turn 1 writes 9,000; turn 2 reads them and writes 9,000; turn 3 reads 18,000.
    chars = 9_001 + 18_001 + 27_001
    assert five["cacheReadShare"] == (9_000 + 18_000) / chars
    assert five["cacheWriteShare"] == hour["cacheWriteShare"] == 18_000 / chars
    per_token = 1 / 4 / 3  # four characters a token, three turns
    plain = chars * per_token * 0.80
    assert round(five["inputUsdUncached"], 6) == round(plain, 6)
    uncached = chars - 27_000 - 18_000
    five_usd = (uncached * 0.80 + 27_000 * 0.08 + 18_000 * 1.00) * per_token
    hour_usd = (uncached * 0.80 + 27_000 * 0.08 + 18_000 * 1.60) * per_token
    assert round(five["inputUsdCached"], 6) == round(five_usd, 6)
    assert round(hour["inputUsdCached"], 6) == round(hour_usd, 6)
    # The summary's call (below the minimum prefix) costs the same either way.
    assert five["summaryCachedChars"] == 0
    assert round(five["summaryInputUsd"], 6) == round(3_900 * per_token * 0.80, 6)
    assert five["allSaving"] < five["saving"]


def figure() -> dict[str, object]:
    row = {
        "inputTokensPerTurn": 2441.0,
        "repeatedShare": 0.75,
        "extendingShare": 0.8,
        "logBytesPerTurn": 1043.0,
        "outputUsd": 1375.0,
    }
    billed = {
        "cacheReadShare": 0.58,
        "cacheWriteShare": 0.22,
        "inputUsdUncached": 1953.0,
        "inputUsdCached": 1044.0,
        "saving": 0.47,
        "summaryInputUsd": 353.0,
        "allSaving": 0.394,
    }
    plain = {**billed, "inputUsdUncached": 2491.0, "inputUsdCached": 2494.0, "saving": -0.001}
    return {
        "turns": 200,
        "questionChars": 200,
        "answerChars": 1200,
        "rows": [{**row, "alignment": 1, "logBytesPerTurn": 977.0}, {**row, "alignment": 10}],
        "billed": [
            {**plain, "alignment": 1, "pace": "a turn a minute", "ttl": "5m"},
            {**billed, "alignment": 10, "pace": "a turn a minute", "ttl": "5m"},
            {**billed, "alignment": 10, "pace": "a turn a minute", "ttl": "1h", "saving": 0.3},
        ],
        "savingBound": 0.4,
        "boundRow": [10, "a turn a minute", "5m"],
        "figure10ModelUsd": 2089.0,
        "logBytesBudget": 1000,
        "prices": {"input": 0.8, "output": 4.0, "cacheWrite": 1.0, "cacheWrite1h": 1.6,
                   "cacheRead": 0.08, "minPrefixTokens": 2048},
    }  # fmt: skip


def test_the_figure_renders_each_alignment_pace_and_ttl_with_its_verdict() -> None:
    text = render_prompt_cache(figure(), table, "15. Prompts a provider can cache")

    assert text.startswith("15. Prompts a provider can cache")
    assert "58% / 22%" in text and "$1,953" in text and "$1,044" in text and "47%" in text
    assert "the turns' input costs 47% less than without caching: PASS (at least 40%)" in text
    assert "all model input, with the summaries' calls, 39% less" in text
    # ... against the default window's input without caching: 2,491 + 353 -> 1,044 + 353.
    assert f"{1 - (1044 + 353) / (2491 + 353):.0%} less than the default window" in text
    assert "calls ($353 per M turns)" in text and "cache write $1.00 (5m) or $1.60 (1h)" in text
    assert "today's figure (figure 10" in text and "$2,089.00 per M turns" in text
    assert "OVER the budget of 1,000 (alignment 10)" in text
    assert "-0%" not in text  # a saving that rounds to nothing has no sign


def test_a_saving_below_the_bound_fails() -> None:
    low = figure()
    low["billed"][1]["saving"] = 0.39  # type: ignore[index]

    assert "FAIL (at least 40%)" in bound_verdict(low)
