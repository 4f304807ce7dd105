"""Figure 16's arithmetic and text: what an erasure costs, from measured counts."""

from __future__ import annotations

import json

from bench.erasure_cost import _dollars, render_erasure
from bench.render import render
from bench.stats import table


def sample_figure() -> dict[str, object]:
    units = {
        "requests": {"Query": 40, "TransactWriteItems": 10, "UpdateItem": 21},
        "readUnits": 40.0,
        "tableWriteUnits": 120.0,
        "indexWriteUnits": 20.0,
        "totalUnits": 180.0,
        "dollarsPerMillion": 40 * 0.125 + 140 * 0.625,
    }
    return {
        "turnsPerSession": 2,
        "rows": [
            {
                "sessions": 10,
                "traces": "keep",
                "runs": 10,
                "tracesErased": 0,
                "tracesKept": 10,
                "dynamodb": units,
                "sqsMessagesSent": 3,
                "jobs": {"erase": 1, "sweep": 2},
                "lambdaInvocations": {"ErasuresFunction": 1, "EraseEndUserFunction": 3},
                "usd": _dollars(units, 3, 4),
            }
        ],
    }


def test_an_erasure_is_priced_from_its_units_messages_and_invocations() -> None:
    units = {"dollarsPerMillion": 92.5}

    # 92.5 (DynamoDB) + 3 sends x 3 SQS requests x $0.40 + 4 requests x $0.20, per million.
    assert _dollars(units, 3, 4) == (92.5 + 9 * 0.40 + 4 * 0.20) / 1_000_000


def test_the_figure_shows_requests_units_messages_and_invocations_per_size() -> None:
    text = render_erasure(sample_figure(), table, "16. Erasing an end user")

    assert "16. Erasing an end user" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("10 "))
    assert row.split() == ["10", "keep", "10", "71", "40", "140", "3", "4", "$0.097"]
    assert "Query 40, TransactWriteItems 10, UpdateItem 21" in text
    assert "EraseEndUserFunction 3, ErasuresFunction 1" in text
    json.dumps(sample_figure())  # what --json prints


def test_the_report_includes_figure_16() -> None:
    results = {
        "meta": {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0},
        "erasure": sample_figure(),
    }

    assert "\n16. Erasing an end user" in render(results)
