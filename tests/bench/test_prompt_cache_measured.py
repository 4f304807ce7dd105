"""``make bench``'s prompt-cache figure (15), on a short conversation through the stack:
with alignment 10 most turns extend the previous prompt and a Bedrock-like cache reads
much of each prompt, a 5-minute TTL beats an hour's at a turn a minute, and pauses longer
than the TTL cost more; with alignment 1 the cache points cost next to nothing."""

from __future__ import annotations

import pytest

from bench.prompt_cache import conversation


def test_the_prompt_cache_figure_measures_what_alignment_and_the_ttl_save() -> None:
    aligned = conversation(turns=40, alignment=10)
    plain = conversation(turns=40, alignment=1)

    assert aligned.turns == plain.turns == 40
    result, other = aligned.result(10), plain.result(1)
    assert result["extendingShare"] >= 0.75
    assert result["repeatedShare"] > 0.6 > other["repeatedShare"]
    steady = aligned.billed("a turn a minute", "5m")
    assert steady["cacheReadShare"] > 0.4 and steady["saving"] > 0.3
    # An hour's writes cost more and buy nothing when turns come a minute apart ...
    assert aligned.billed("a turn a minute", "1h")["saving"] < steady["saving"]
    # ... while a pause longer than 5 minutes loses the 5-minute cache, not the hour's.
    paused = aligned.billed("7-minute pause every 10 turns", "5m")
    assert paused["cacheReadShare"] < steady["cacheReadShare"]
    hour_paused = aligned.billed("7-minute pause every 10 turns", "1h")
    hour_steady = aligned.billed("a turn a minute", "1h")
    for figure in ("cacheReadShare", "cacheWriteShare", "inputUsdCached"):
        assert hour_paused[figure] == pytest.approx(hour_steady[figure])
    # The summaries' calls are billed and never cached.
    assert steady["summaryInputUsd"] > 0 and steady["allSaving"] < steady["saving"]
    # Without alignment the window moves every turn: no message is marked once it has
    # filled, so caching costs (almost) nothing more than no caching.
    alone = plain.billed("a turn a minute", "5m")
    assert alone["inputUsdCached"] <= alone["inputUsdUncached"] * 1.01
    assert alone["cacheWriteShare"] < 0.1
