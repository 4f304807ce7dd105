"""The report's first lines: what the run measured, in plain words, for someone who reads
no further (at most ``MAX_LINES`` lines). Pure: every number comes from the results of
the same run, and a figure that was not measured leaves its line out.

Each line is one function of ``LINES`` (results -> a sentence, or None when its figures
are missing), naming the figure that shows the details; a new figure adds its line
there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_LINES = 12
Results = Mapping[str, Any]


def _requests(ops: Mapping[str, float]) -> float:
    return sum(ops.values())


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or float(value).is_integer() else f"{value:.1f}"


def _dollars(value: float) -> str:
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}"


def turn_cost(results: Results) -> str | None:
    """Per-turn requests and cost by history length (figure 2)."""
    rows = results["serving"]["storageCost"]["rows"]
    first, last = rows[0], rows[-1]
    counts = {_requests(row["requests"]) for row in rows}
    requests = (
        f"{_number(counts.pop())} DynamoDB requests whatever its history"
        if len(counts) == 1
        else f"{_number(min(counts))} to {_number(max(counts))} DynamoDB requests"
    )
    return (
        f"A turn makes {requests}: {_dollars(first['dollarsPerMillion'])} per million turns"
        f" at {first['history']:,} messages, {_dollars(last['dollarsPerMillion'])} at"
        f" {last['history']:,} (figure 2)."
    )


def model_share(results: Results) -> str | None:
    """The model's share of a turn's cost, and the summary's (figures 8 and 10)."""
    million = results["millionTurns"]
    model, rest = million["modelUsd"], million["totalUsd"]
    line = (
        f"The model is {model / (model + rest):.1%} of the cost: {_dollars(model)} per million"
        f" turns, against {_dollars(rest)} for everything else on AWS (figure 10)"
    )
    share = results.get("summaryCost", {}).get("summaryShare", {}).get("dollars")
    if share is not None:
        line += f"; the rolling summary is {share:.0%} of it all (figure 8)"
    return line + "."


def cache_savings(results: Results) -> str | None:
    """What a provider's prompt cache saves with an aligned replay window (figure 15)."""
    figure = results["promptCache"]
    alignment, pace, ttl = figure["boundRow"]
    [row] = [
        b
        for b in figure["billed"]
        if (b["alignment"], b["pace"], b["ttl"]) == tuple(figure["boundRow"])
    ]
    return (
        f"With replay.alignment {alignment}, Bedrock's prompt cache cuts the model's input bill"
        f" by {row['saving']:.0%} ({pace}, {ttl} cache; figure 15)."
    )


def fault_soak(results: Results) -> str | None:
    """The worst fault rate of the outage soak (figure 12)."""
    figure = results["outage"]
    run = max(figure["runs"], key=lambda r: r["fault_rate"])
    settled = run["settled_after_seconds"]
    repaired = "never all repaired" if settled is None else f"all repaired within {settled:.0f} s"
    return (
        f"Under faults ({run['fault_rate']:.0%} of transcript writes and queue sends failing):"
        f" {run['answered']} of {figure['turns']} turns answered, {run['lost']} lost,"
        f" {run['duplicated']} recorded twice, {repaired} (figure 12)."
    )


def cold_start(results: Results) -> str | None:
    """The predict handler's cold first request, and the slowest handler import (figure 3)."""
    first = results["firstInvocation"]
    line = (
        f"Cold start: the predict function's first request takes"
        f" {first['coldTotalSeconds'] * 1000:,.0f} ms, a warm one"
        f" {first['medianSeconds']['warmRequest'] * 1000:,.0f} ms"
    )
    rows = [r for r in results.get("importTimes", {}).get("rows", []) if r.get("ratio")]
    if rows:
        slowest = max(rows, key=lambda r: r["ratio"])
        line += f"; the slowest handler imports in {slowest['ratio']:.2f}x the time of boto3 alone"
    return line + " (figure 3)."


def _added(row: Mapping[str, Any]) -> str:
    added = row["addedHandlerTime"]
    return f"{abs(added):.0%} {'more' if added > 0 else 'less'}"


def door_overhead(results: Results) -> str | None:
    """What the OpenAI-compatible doors add to a turn next to predict (figures 14, 20)."""
    doors = [
        (name, row)
        for key, name in (("chatDoor", "chat completions"), ("responsesDoor", "Responses"))
        for row in results.get(key, {}).get("rows", [])
        if "addedHandlerTime" in row
    ]
    if not doors:
        return None
    same = all(row["sameRequests"] and row["sameUnits"] for _, row in doors)
    times = ", ".join(f"{name} {_added(row)}" for name, row in doors[:2])
    requests = "the same DynamoDB requests as" if same else "OTHER DynamoDB requests than"
    return (
        f"Doors: the OpenAI-compatible ones make {requests} predict, in handler time"
        f" {times} (figures 14, 20)."
    )


def stream_first_words(results: Results) -> str | None:
    """When a streamed answer's first words arrive (figure 4)."""
    rows = results["serving"]["streamFirstEvent"]["rows"]
    [url] = [row for row in rows if row["door"] == "stream-url"]
    return (
        f"Streaming: the first words arrive after {url['ratio']:.0%} of the answer's time on"
        " the Function URL; through API Gateway all at once (figure 4)."
    )


def langchain_comparison(results: Results) -> str | None:
    """A turn here next to LangChain's DynamoDB chat history, at the longest history
    (figure 21)."""
    row = results["langchainHistory"]["rows"][-1]
    ours, theirs = row["ours"], row["langchain"]
    return (
        f"Against LangChain's DynamoDB history at {row['history']:,} messages:"
        f" {_dollars(ours['dollarsPerMillion'])} vs {_dollars(theirs['dollarsPerMillion'])}"
        f" of DynamoDB per million turns, {ours['promptTokens']:,} vs"
        f" {theirs['promptTokens']:,} prompt tokens a turn (figure 21)."
    )


LINES: Sequence[Callable[[Results], str | None]] = (
    turn_cost,
    model_share,
    cache_savings,
    fault_soak,
    cold_start,
    door_overhead,
    stream_first_words,
    langchain_comparison,
)


def headline(results: Results, lines: Sequence[Callable[[Results], str | None]] = LINES) -> str:
    """The headline: a title, then a line per figure that was measured (at most
    ``MAX_LINES`` lines in all)."""
    meta = results["meta"]
    title = (
        f"convo-memory bench, {'quick' if meta['quick'] else 'full'} run: in short"
        " (every number measured in this run; the figures below show how)"
    )
    said = [title]
    for line in lines:
        try:
            text = line(results)
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
            text = None  # its figure was not measured (or not whole): no line
        if text:
            said.append(f"- {text}")
    return "\n".join(said[:MAX_LINES])
