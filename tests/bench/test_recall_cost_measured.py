"""``make bench``'s recall figure: opening a session with recall costs one listing, one
read per recalled session and one transaction; a turn of such a session makes the same
requests as one without recall."""

from __future__ import annotations

from bench.recall_cost import recall_cost_figure, render_recall_cost
from bench.stats import table


def test_the_recall_figure_prices_the_opening_and_shows_turns_unchanged() -> None:
    figure = recall_cost_figure(lambda message: None)

    opening = {row["case"]: row for row in figure["opening"]}
    assert opening["no recall"]["requests"] == {"PutItem": 1}
    assert opening["recall {sessions: 5}, nothing earlier"]["requests"] == {
        "Query": 1,
        "PutItem": 1,
    }
    for budget in ("{sessions: 5}", "{sessions: 5, maxChars: 8000}"):
        row = opening[f"recall {budget}, 5 earlier sessions"]
        assert row["requests"] == {"Query": 1 + 5, "TransactWriteItems": 1}
        assert row["recalledSessions"] == 5
        assert (
            row["totalUnits"] > 0
            and row["tableWriteUnits"] > opening["no recall"]["tableWriteUnits"]
        )
    turns = {row["session"]: row for row in figure["turns"]}
    assert len({str(row["requests"]) for row in turns.values()}) == 1
    assert turns["recall {sessions: 5}"]["recallChars"] == 2_000
    text = render_recall_cost(figure, table, "13. recall")
    assert "the same with and without recall" in text and "TransactWriteItems 1" in text
