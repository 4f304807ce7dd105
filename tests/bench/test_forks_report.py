"""Figure 18's text: creating a fork, its copy job and a turn on it, from measured rows."""

from __future__ import annotations

from typing import Any

from bench.forks_cost import render_forks
from bench.render import render
from bench.stats import table


def units(requests: dict[str, int], read: float, write: float) -> dict[str, Any]:
    return {
        "requests": requests,
        "readUnits": read,
        "tableWriteUnits": write,
        "indexWriteUnits": 0.0,
        "totalUnits": read + write,
        "dollarsPerMillion": read * 0.125 + write * 0.625,
    }


def sample_figure(fork_reads: float = 1.0) -> dict[str, Any]:
    turn = {"PutItem": 1, "Query": 1, "UpdateItem": 1}
    return {
        "messages": 1000,
        "creating": [
            {"case": "open a session", "ms": 2.5} | units({"PutItem": 1}, 0, 3),
            {"case": "fork a 1,000-message session at its last answer", "ms": 61.4}
            | units({"Query": 3, "BatchWriteItem": 1, "TransactWriteItems": 1}, 5, 21),
        ],
        "copy": {"case": "copy the rest", "ms": 540.0} | units({"BatchWriteItem": 20}, 46, 497),
        "turns": [
            {"session": "plain session"} | units(turn, 1, 2),
            {"session": "fork"} | units(turn, fork_reads, 2),
        ],
    }


def test_the_forks_figure_prints_the_forks_time_and_its_turn_next_to_a_plain_one() -> None:
    text = render_forks(sample_figure(), table, "18. Forks")

    assert "fork a 1,000-message session at its last answer" in text and "61.4" in text
    assert "BatchWriteItem 20" in text
    assert "the same requests and read units as on a plain session" in text
    meta = {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0}
    assert "\n18. Forks" in render({"meta": meta, "forks": sample_figure()})


def test_a_fork_turn_reading_more_is_called_out() -> None:
    assert "NOT the same" in render_forks(sample_figure(fork_reads=2.0), table, "18. Forks")
