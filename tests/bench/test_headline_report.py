"""``make bench``'s headline (bench/headline.py): at most 12 plain lines at the top of the
report, every number taken from the run's own results, and a line left out when its
figure was not measured."""

from __future__ import annotations

from typing import Any

from bench.headline import LINES, MAX_LINES, headline
from bench.render import render


def measured() -> dict[str, Any]:
    """The results the headline reads, as a run leaves them (the other figures apart)."""
    doors: list[dict[str, Any]] = [
        {"door": "predict"},
        {"door": "chat", "addedHandlerTime": -0.011, "sameRequests": True, "sameUnits": True},
    ]
    return {
        "meta": {"quick": True, "python": "3.13.0", "cpus": 2, "seconds": 147.0},
        "serving": {
            "storageCost": {
                "rows": [
                    {
                        "history": 10,
                        "requests": {"PutItem": 1, "Query": 1, "UpdateItem": 1},
                        "dollarsPerMillion": 1.375,
                    },
                    {
                        "history": 1000,
                        "requests": {"PutItem": 1, "Query": 1, "UpdateItem": 1},
                        "dollarsPerMillion": 1.5,
                    },
                ]
            },
            "streamFirstEvent": {
                "rows": [
                    {"door": "stream-buffered", "ratio": 1.0},
                    {"door": "stream-url", "ratio": 0.17},
                ]
            },
        },
        "millionTurns": {"modelUsd": 1944.37, "totalUsd": 4.69},
        "summaryCost": {"summaryShare": {"dollars": 0.16}},
        "promptCache": {
            "boundRow": [10, "a turn a minute", "5m"],
            "billed": [
                {"alignment": 1, "pace": "a turn a minute", "ttl": "5m", "saving": 0.01},
                {"alignment": 10, "pace": "a turn a minute", "ttl": "5m", "saving": 0.45},
            ],
        },
        "outage": {
            "turns": 400,
            "runs": [
                {
                    "fault_rate": 0.25,
                    "answered": 400,
                    "lost": 0,
                    "duplicated": 0,
                    "settled_after_seconds": 0,
                },
                {
                    "fault_rate": 0.6,
                    "answered": 398,
                    "lost": 1,
                    "duplicated": 0,
                    "settled_after_seconds": 13.2,
                },
            ],
        },
        "firstInvocation": {"coldTotalSeconds": 0.6191, "medianSeconds": {"warmRequest": 0.0137}},
        "importTimes": {"rows": [{"ratio": 0.79}, {"ratio": 0.17}, {"missing": True}]},
        "chatDoor": {"rows": doors},
        "responsesDoor": {"rows": [doors[0], {**doors[1], "addedHandlerTime": 0.031}]},
        "langchainHistory": {
            "rows": [
                {
                    "history": 1000,
                    "ours": {"dollarsPerMillion": 1.5, "promptTokens": 1267},
                    "langchain": {"dollarsPerMillion": 298.38, "promptTokens": 30030},
                },
            ]
        },
    }


def test_the_headline_is_at_most_12_lines_each_from_the_runs_own_figures() -> None:
    text = headline(measured())

    lines = text.splitlines()
    assert len(lines) <= MAX_LINES
    assert len(lines) == 1 + len(LINES)  # a title, then a line per measured figure
    for said in (
        "A turn makes 3 DynamoDB requests whatever its history: $1.38 per million turns at 10"
        " messages, $1.50 at 1,000 (figure 2).",
        "The model is 99.8% of the cost: $1,944 per million turns, against $4.69 for"
        " everything else on AWS (figure 10); the rolling summary is 16% of it all (figure 8).",
        "by 45% (a turn a minute, 5m cache; figure 15)",
        "(60% of transcript writes and queue sends failing): 398 of 400 turns answered, 1 lost,"
        " 0 recorded twice, all repaired within 13 s (figure 12)",
        "first request takes 619 ms, a warm one 14 ms; the slowest handler imports in 0.79x",
        "in handler time chat completions 1% less, Responses 3% more (figures 14, 20)",
        "after 17% of the answer's time",
        "at 1,000 messages: $1.50 vs $298 of DynamoDB per million turns, 1,267 vs 30,030"
        " prompt tokens a turn (figure 21)",
    ):
        assert said in text


def test_the_headline_follows_what_was_measured_and_leaves_out_what_was_not() -> None:
    results = measured()
    results["outage"]["runs"][1]["lost"] = 7
    results["millionTurns"]["modelUsd"] = 100.0
    del results["langchainHistory"]
    results["serving"]["storageCost"]["rows"][1]["requests"]["GetItem"] = 1

    text = headline(results)

    assert "7 lost" in text and "$100 per million turns" in text
    assert "LangChain" not in text
    assert "A turn makes 3 to 4 DynamoDB requests" in text
    assert len(text.splitlines()) == len(LINES)


def test_a_new_figure_adds_its_line_and_the_headline_stays_within_12() -> None:
    extra = [lambda results, n=n: f"a new figure's line {n}" for n in range(10)]

    text = headline(measured(), [*LINES, *extra])

    assert len(text.splitlines()) == MAX_LINES
    assert "a new figure's line 0" in text


def test_the_report_opens_with_the_headline() -> None:
    results = {"meta": measured()["meta"], "errors": {"serving": "RuntimeError: boom"}}
    text = render(results)
    assert text.startswith(headline(results) + "\n\nconvo-memory bench (quick run")
    assert text.splitlines()[0].startswith("convo-memory bench, quick run: in short")
