"""Classic ML capability: a stateless, deterministic, embedded sentiment scorer.

It stands in for a real classic model (a classifier behind an endpoint): one input,
one JSON answer ``{"label": "positive"|"negative"|"neutral", "score": <-1..1>}``.
``score`` is the polarity (positive minus negative cues over all cues); a negation word
flips the next cue within three words ("not very good").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from convo_memory.adapters.providers.embedded import latest_input
from convo_memory.domain.generation import Completion
from convo_memory.domain.prompt import Prompt

_POSITIVE = frozenset(
    [
        "good",
        "great",
        "excellent",
        "love",
        "loved",
        "lovely",
        "like",
        "liked",
        "happy",
        "glad",
        "awesome",
        "amazing",
        "fantastic",
        "nice",
        "perfect",
        "wonderful",
        "helpful",
        "fast",
        "easy",
        "thanks",
        "thank",
        "best",
        "pleased",
        "recommend",
        "works",
    ]
)
_NEGATIVE = frozenset(
    [
        "bad",
        "terrible",
        "awful",
        "hate",
        "hated",
        "poor",
        "slow",
        "broken",
        "angry",
        "sad",
        "worst",
        "useless",
        "disappointed",
        "disappointing",
        "problem",
        "problems",
        "issue",
        "issues",
        "fail",
        "failed",
        "failing",
        "wrong",
        "refund",
        "late",
    ]
)
_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "wasn't",
        "won't",
        "can't",
        "cannot",
    ]
)
_WORD = re.compile(r"[a-z']+")


def score_sentiment(text: str) -> tuple[str, float]:
    """Return ``(label, score)``; deterministic for a given text."""
    positive = negative = 0
    negated_words = 0  # how many of the next words a negation still covers
    for word in _WORD.findall(text.casefold().replace("\u2019", "'")):
        if word in _NEGATIONS:
            negated_words = 3
            continue
        polarity = 1 if word in _POSITIVE else -1 if word in _NEGATIVE else 0
        if polarity:
            if negated_words:
                polarity = -polarity
                negated_words = 0
            if polarity > 0:
                positive += 1
            else:
                negative += 1
        elif negated_words:
            negated_words -= 1
    cues = positive + negative
    score = round((positive - negative) / cues, 4) if cues else 0.0
    label = "positive" if score > 0 else "negative" if score < 0 else "neutral"
    return label, score


class ClassicModelProvider:
    """Stateless classic model: the answer is ``{"label": ..., "score": ...}`` as JSON."""

    def complete(self, prompt: Prompt) -> Completion:
        label, score = score_sentiment(latest_input(prompt))
        return Completion(text=json.dumps({"label": label, "score": score}))

    def stream(self, prompt: Prompt) -> Iterator[str]:
        """A classic answer is not incremental: one delta with the whole JSON."""
        yield self.complete(prompt).text
