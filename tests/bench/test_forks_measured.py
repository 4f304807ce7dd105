"""``make bench``'s forks figure, measured (on a 200-message parent here, to be quick):
creating a fork of a long session makes the requests a fork of a 10-message one makes,
and a turn on the fork the requests and read units of a turn on a plain session of the
same messages."""

from __future__ import annotations

from bench.forks_cost import forks_figure


def test_the_forks_figure_shows_a_bounded_creation_and_a_plain_turn() -> None:
    figure = forks_figure(lambda message: None, timed=1, long=200)

    creating = {row["case"]: row for row in figure["creating"]}
    short = creating["fork a 10-message session at its last answer"]
    long = creating["fork a 200-message session at its last answer"]
    assert short["requests"] == long["requests"]
    assert long["requests"]["BatchWriteItem"] == 1
    assert figure["copy"]["requests"]["BatchWriteItem"] == 4  # 90 turns, 25 a batch
    plain, fork = figure["turns"]
    assert (fork["requests"], fork["readUnits"]) == (plain["requests"], plain["readUnits"])
    assert fork["requests"]["Query"] == 1
