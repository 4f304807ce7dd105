"""Figure 6: the embedded content filter's time on a 30,000-character answer.

Patterns run on RE2, whose time grows with the answer's length times the compiled
program's size; a capability's patterns are bounded to ``MAX_PATTERN_PROGRAM_SIZE``
instructions in total. For each family of patterns known to be hard for automata
(counted repetitions of ``.*``, alternations that keep many states alive), the largest
member within that budget is timed on three answers; the slowest combination is the
worst pattern reported, next to a plain pattern, the ``(a+)+$`` of issue 7 (exponential
for a backtracking engine) and blocked terms at their bounds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from bench.stats import median

ANSWER_CHARS = 30_000
# %d is the repetition count, raised until the program would exceed the budget.
HARD_FAMILIES = (
    "(.*a){%d}",
    "(.*(a|b)){%d}",
    "(.*[ab]){%d}",
    "(x|.)*(.*a){%d}",
    "(.*a.*b){%d}",
    "((a|b)*b){%d}",
    "[ab]*a[ab]{%d}",
    "(a|b|.)*.{%d}",
    r"(\w*\s?){%d}$",
    ".{0,%d}x",
)
PLAIN_PATTERN = r"\b\d{3}-\d{2}-\d{4}\b"
ISSUE_PATTERN = "(a+)+$"


def answers() -> dict[str, str]:
    """Three 30,000-character answers: one letter, two letters at random, prose."""
    rng = random.Random(7)
    return {
        "a x 29,999 + '!'": "a" * (ANSWER_CHARS - 1) + "!",
        "random a/b": "".join(rng.choice("ab") for _ in range(ANSWER_CHARS)),
        "prose": ("Your order 12345 ships on Monday; the ETA is two days. " * 600)[:ANSWER_CHARS],
    }


def largest_within_budget(family: str) -> tuple[str, int] | None:
    """The family's member with the most repetitions whose program fits the budget."""
    from convo_memory.domain.models import MAX_PATTERN_PROGRAM_SIZE, compile_blocked_pattern

    best: tuple[str, int] | None = None
    low, high = 1, 1000  # RE2's largest repetition count
    while low <= high:  # program size grows with the count: binary search
        count = (low + high) // 2
        pattern = family % count
        try:
            size = int(compile_blocked_pattern(pattern).programsize)
        except ValueError:
            size = MAX_PATTERN_PROGRAM_SIZE + 1
        if size <= MAX_PATTERN_PROGRAM_SIZE:
            best, low = (pattern, size), count + 1
        else:
            high = count - 1
    return best


def _seconds(check: Callable[[str], Any], text: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        check(text)
        samples.append(time.perf_counter() - began)
    return median(samples)


def filter_figures(runs: int, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Median seconds of ``EmbeddedContentFilter.check`` per case (a JSON-able dict)."""
    from convo_memory.adapters.filters import EmbeddedContentFilter
    from convo_memory.domain.models import (
        MAX_BLOCKED_TERMS,
        MAX_PATTERN_PROGRAM_SIZE,
        MAX_TERM_CHARS,
        compile_blocked_pattern,
    )

    texts = answers()
    progress("content filter: searching the worst pattern within the bounds")
    worst: tuple[float, str, int, str] | None = None
    for family in HARD_FAMILIES:
        found = largest_within_budget(family)
        if found is None:
            continue
        pattern, size = found
        candidate = EmbeddedContentFilter(blocked_patterns=[pattern]).check
        for name, text in texts.items():
            seconds = _seconds(candidate, text, 1)
            if worst is None or seconds > worst[0]:
                worst = (seconds, pattern, size, name)
    assert worst is not None
    _, worst_pattern, worst_size, worst_text = worst

    # Terms are plain substring searches; the worst text makes each one nearly match.
    terms = ["a" * (MAX_TERM_CHARS - 3) + f"{i:03d}" for i in range(MAX_BLOCKED_TERMS)]
    cases: list[tuple[str, str, Callable[[str], Any], str, int | None]] = [
        (
            "plain pattern",
            PLAIN_PATTERN,
            EmbeddedContentFilter(blocked_patterns=[PLAIN_PATTERN]).check,
            "prose",
            int(compile_blocked_pattern(PLAIN_PATTERN).programsize),
        ),
        (
            "issue 7's pattern",
            ISSUE_PATTERN,
            EmbeddedContentFilter(blocked_patterns=[ISSUE_PATTERN]).check,
            "a x 29,999 + '!'",
            int(compile_blocked_pattern(ISSUE_PATTERN).programsize),
        ),
        (
            "worst pattern found",
            worst_pattern,
            EmbeddedContentFilter(blocked_patterns=[worst_pattern]).check,
            worst_text,
            worst_size,
        ),
        (
            f"{MAX_BLOCKED_TERMS} terms of {MAX_TERM_CHARS} chars",
            "97 a's + 3 digits, each",
            EmbeddedContentFilter(blocked_terms=terms).check,
            "a x 29,999 + '!'",
            None,
        ),
    ]
    rows = []
    for case, shown, check, text_name, program_size in cases:
        progress(f"content filter: {case}")
        rows.append(
            {
                "case": case,
                "pattern": shown,
                "programSize": program_size,
                "answer": text_name,
                "medianSeconds": _seconds(check, texts[text_name], runs),
            }
        )
    return {
        "answerChars": ANSWER_CHARS,
        "programBudget": MAX_PATTERN_PROGRAM_SIZE,
        "runs": runs,
        "familiesTried": len(HARD_FAMILIES),
        "rows": rows,
    }
