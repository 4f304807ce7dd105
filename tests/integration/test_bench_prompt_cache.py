"""``make bench``'s prompt-cache figure (13), on a short conversation: with alignment 10
most turns extend the previous prompt and a Bedrock-like cache reads much of each prompt;
with alignment 1 the cache points cost nothing extra."""

from __future__ import annotations

from bench.prompt_cache import conversation


def test_the_prompt_cache_figure_measures_what_alignment_saves() -> None:
    aligned = conversation(turns=40, alignment=10)
    plain = conversation(turns=40, alignment=1)

    assert aligned["turns"] == plain["turns"] == 40
    assert aligned["extendingShare"] >= 0.75
    assert aligned["repeatedShare"] > 0.6 > plain["repeatedShare"]
    assert aligned["cacheReadShare"] > 0.4
    assert aligned["modelUsdCached"] < 0.85 * aligned["modelUsdUncached"]
    # Without alignment the window moves every turn: no message is marked once it has
    # filled, so caching costs (almost) nothing more than no caching.
    assert plain["modelUsdCached"] <= plain["modelUsdUncached"]
    assert plain["cacheWriteShare"] < 0.1
