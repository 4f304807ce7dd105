"""CONVO_EMBEDDED_CHUNK_DELAY_MS: the embedded model streams slowly enough to watch."""

from __future__ import annotations

import pytest

from convo_memory.adapters.providers import embedded
from convo_memory.adapters.providers.embedded import EmbeddedChatProvider
from convo_memory.domain.prompt import Prompt


def prompt(text: str) -> Prompt:
    return Prompt(system="", messages=(), user_input=text)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    recorded: list[float] = []
    monkeypatch.setattr(embedded.time, "sleep", recorded.append)
    return recorded


def test_the_variable_delays_every_streamed_chunk(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    monkeypatch.setenv("CONVO_EMBEDDED_CHUNK_DELAY_MS", "40")

    chunks = list(EmbeddedChatProvider().stream(prompt("one two three")))

    assert len(chunks) > 3
    assert sleeps == [0.04] * len(chunks)


def test_unset_blank_or_invalid_means_no_delay(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    for value in (None, "", "soon", "-5"):
        if value is None:
            monkeypatch.delenv("CONVO_EMBEDDED_CHUNK_DELAY_MS", raising=False)
        else:
            monkeypatch.setenv("CONVO_EMBEDDED_CHUNK_DELAY_MS", value)
        assert list(EmbeddedChatProvider().stream(prompt("one two")))

    assert sleeps == []


def test_an_explicit_delay_wins_over_the_variable(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    monkeypatch.setenv("CONVO_EMBEDDED_CHUNK_DELAY_MS", "40")

    chunks = list(EmbeddedChatProvider(chunk_delay=0.0).stream(prompt("one two")))

    assert chunks and sleeps == []
