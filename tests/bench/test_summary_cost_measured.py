"""``make bench``'s summary cost figure, on a short conversation: it measures the turn and
its summary apart, and the summary stays a small share."""

from __future__ import annotations

from bench.summary_cost import summary_cost


def test_the_summary_cost_figure_measures_both_sides_of_a_conversation() -> None:
    figure = summary_cost(turns=30)

    turn, summary, share = figure["turn"], figure["summary"], figure["summaryShare"]
    # The authorizer runs on every request (no cache), then the turn's function.
    assert turn["modelCalls"] == 1 and turn["lambdaInvocations"] == 2
    assert {name: use["invocations"] for name, use in turn["functions"].items()} == {
        "AuthorizerFunction": 1,
        "PredictFunction": 1,
    }
    assert set(summary["functions"]) == {"SummarizeFunction"}
    assert turn["sqsRequests"] == 0  # the trigger's send is the summary's
    # Folds at turns 10, 15, ..., 30: one model call and one invocation per batch.
    assert summary["modelCalls"] == summary["lambdaInvocations"] == 5 / 30
    # Per job: the trigger's send, the event source's receive and delete.
    assert summary["sqsRequests"] == 3 * 5 / 30
    # One summary write per fold: the summary and its kept version, in one transaction.
    assert summary["dynamoOps"]["TransactWriteItems"] == 5 / 30
    assert 0 < summary["dynamoUnits"] < turn["dynamoUnits"]
    assert figure["turnsWithAGap"] == 0
    assert figure["finalThroughSeq"] >= figure["finalOmitted"] == 40
    assert share["dollars"] is not None and share["dollars"] < figure["shareLimit"]
