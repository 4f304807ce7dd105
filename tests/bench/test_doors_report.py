"""Figures 14 and 20's text and verdicts: doors next to predict, from measured units and
times (no stack, no clock)."""

from __future__ import annotations

from typing import Any

from bench.chat_door import LABELS as CHAT_LABELS
from bench.chat_door import render_chat_door
from bench.doors import door_figure
from bench.render import render
from bench.responses_door import LABELS, render_responses_door
from bench.stats import table

TURN = {"PutItem": 1, "Query": 1, "UpdateItem": 1}
META = {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0}


def units(requests: dict[str, int] = TURN, read: float = 1, write: float = 2) -> dict[str, Any]:
    return {
        "requests": requests,
        "readUnits": read,
        "tableWriteUnits": write,
        "indexWriteUnits": 0.0,
    }


def figure(previous: dict[str, Any] | None = None, previous_ms: float = 10.2) -> dict[str, Any]:
    measured = {
        "predict": [units()] * 3,
        "previous": [previous or units()] * 3,
        "conversation": [units()] * 3,
        "items": [units()] * 3,
    }
    seconds = {
        "predict": [0.010, 0.011, 0.009],
        "previous": [previous_ms / 1000] * 3,
        "conversation": [0.0099] * 3,
        "items": [0.0101] * 3,
    }
    return door_figure(measured, seconds, LABELS, 3)


def test_each_door_is_compared_with_predict_and_printed_in_the_report() -> None:
    measured = figure()
    previous = measured["rows"][1]

    assert measured["sameRequests"] and measured["sameUnits"] and measured["withinBound"]
    assert previous["addedHandlerTime"] == 10.2 / 10 - 1
    text = render_responses_door(measured, table, "20. The Responses door")
    assert "previous: DynamoDB requests and units equal to predict's" in text
    assert "added handler time +2.0% (within the 5% bound)" in text
    assert "conversation: DynamoDB requests and units equal" in text
    report = render({"meta": META, "responsesDoor": measured})
    assert "\n20. The Responses door next to predict" in report


def test_a_door_that_reads_more_or_takes_longer_is_called_out() -> None:
    costlier = figure(units({**TURN, "BatchGetItem": 1}, read=2))
    assert not costlier["sameRequests"] and not costlier["sameUnits"]
    assert "previous: DynamoDB requests and units NOT equal" in render_responses_door(
        costlier, table, "20."
    )
    slower = figure(previous_ms=10.6)
    assert not slower["withinBound"] and slower["addedHandlerTime"] > 0.05
    assert "(OVER the 5% bound)" in render_responses_door(slower, table, "20.")


def test_the_stored_calls_are_listed_beside() -> None:
    measured = figure()
    measured["stored"] = [
        {"call": "GET /v1/responses/{id}"} | units({"BatchGetItem": 1}, 3, 0) | {"totalUnits": 3.0}
    ]
    text = render_responses_door(measured, table, "20.")
    assert "GET /v1/responses/{id}" in text and "BatchGetItem 1" in text


def test_the_chat_door_figure_reads_as_before() -> None:
    measured = door_figure(
        {"predict": [units()] * 3, "chat": [units(read=2), units(), units()]},
        {"predict": [0.01], "chat": [0.0101]},
        CHAT_LABELS,
        1,
    )
    text = render_chat_door(measured, table, "14.")
    assert "chat: DynamoDB requests and units equal to predict's" in text
    # One metered turn of the three read more: said so.
    assert "did NOT all cost the same" in text
