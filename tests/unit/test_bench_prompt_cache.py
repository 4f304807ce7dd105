"""Figure 15's arithmetic (prompts a provider can cache): where the adapter's cache points
fall, what a Bedrock-like cache reads and writes, OpenAI's reported cached tokens, the
price per million turns, and the rendered figure."""

from __future__ import annotations

from bench.prompt_cache import (
    BedrockCache,
    Tally,
    cache_points,
    common_prefix,
    openai_cached_tokens,
    render_prompt_cache,
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


def test_openai_reports_a_shared_prefix_from_1024_tokens_in_steps_of_128() -> None:
    base = "p" * 4 * 2_000
    assert common_prefix(base, base + "more") == len(base)
    assert openai_cached_tokens(base, base + "more") == 1_024 + 7 * 128
    assert openai_cached_tokens(base[:4_000], base) == 0  # 1,000 tokens: below the minimum
    assert openai_cached_tokens("", base) == 0


def test_the_price_per_million_turns_uses_the_cache_prices_only_with_caching() -> None:
    tally = Tally(turns=2, input_chars=8_000_000, read_chars=4_000_000, write_chars=2_000_000)

    # Per token: input 0.80, write 1.00, read 0.08 per million; 4 chars a token.
    assert round(tally.per_million(cached=False), 2) == round(2e6 * 0.8 / 2, 2)
    assert round(tally.per_million(cached=True), 2) == round(
        (0.5e6 * 0.8 + 0.5e6 * 1.0 + 1e6 * 0.08) / 2, 2
    )


def test_the_figure_renders_each_alignment_next_to_todays_figure() -> None:
    row = {
        "inputTokensPerTurn": 2441.0,
        "repeatedShare": 0.75,
        "extendingShare": 0.8,
        "cacheReadShare": 0.58,
        "cacheWriteShare": 0.22,
        "modelUsdUncached": 3681.0,
        "modelUsdCached": 2773.0,
        "logBytesPerTurn": 1043.0,
    }
    figure = {
        "turns": 200,
        "questionChars": 200,
        "answerChars": 1200,
        "rows": [{**row, "alignment": 1, "logBytesPerTurn": 977.0}, {**row, "alignment": 10}],
        "figure10ModelUsd": 2089.0,
        "logBytesBudget": 1000,
        "prices": {"input": 0.8, "output": 4.0, "cacheWrite": 1.0, "cacheRead": 0.08,
                   "minPrefixTokens": 2048},
    }  # fmt: skip

    text = render_prompt_cache(figure, table, "13. Prompts a provider can cache")

    assert text.startswith("13. Prompts a provider can cache")
    assert "75%" in text and "58% / 22%" in text and "$2,773" in text and "$3,681" in text
    assert "today's figure (figure 10" in text and "$2,089.00 per M turns" in text
    assert "OVER the budget of 1,000 (alignment 10)" in text
