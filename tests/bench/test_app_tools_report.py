"""Figure 19's text and verdicts: the app's own tools' turns, from measured units."""

from __future__ import annotations

from typing import Any

from bench.app_tools import _figure, render_app_tools
from bench.render import render
from bench.stats import table


def units(
    requests: dict[str, int], read: float, table_write: float, index: float = 0
) -> dict[str, Any]:
    return {
        "requests": requests,
        "readUnits": read,
        "tableWriteUnits": table_write,
        "indexWriteUnits": index,
    }


TURN = {"PutItem": 1, "Query": 1, "UpdateItem": 1}
MEASURED = {
    "plain": units(TURN, 1, 2),
    "offered": units(TURN, 1, 2),
    "pause": units(TURN, 1, 2, 1),
    "continuation": units({"PutItem": 3, "Query": 1, "UpdateItem": 1}, 1, 4, 1),
}


def test_the_figure_says_an_offered_turn_costs_what_a_plain_one_does_and_a_pause_one_put() -> None:
    figure = _figure(MEASURED)
    text = render_app_tools(figure, table, "19. The app's own tools")

    assert figure["offeredCostsAsPlain"] is True and figure["pauseExtraWrites"] == 1
    assert "costs the same as a plain turn" in text and "PutItem 3, Query 1" in text
    meta = {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0}
    assert "\n19. The app's own tools" in render({"meta": meta, "appTools": figure})


def test_an_offered_turn_that_reads_more_is_called_out() -> None:
    figure = _figure({**MEASURED, "offered": units(TURN, 2, 2)})
    assert "NOT the same as a plain turn" in render_app_tools(figure, table, "19.")
