"""One metrics record per invocation: what an invocation counts is written as one
CloudWatch EMF record when its door ends (a failed one too), each metric with its own
dimensions; and the log lines name the function and the request, nothing more."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from convo_memory import observability
from convo_memory.observability import InvocationMetrics, http_handler, job_handler
from tests.support.turns import served


@dataclass
class Context:
    function_name: str = "PredictFunction"
    aws_request_id: str = "req-lambda-1"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:PredictFunction"


@pytest.fixture(autouse=True)
def emf_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "convo-memory")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ConvoMemory")
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)


def records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def directives(record: dict[str, Any]) -> dict[str, list[str]]:
    """Metric name -> the dimension names it is published under."""
    return {
        metric["Name"]: directive["Dimensions"][0]
        for directive in record["_aws"]["CloudWatchMetrics"]
        for metric in directive["Metrics"]
    }


def published(written: list[dict[str, Any]]) -> list[tuple[str, dict[str, str], list[float]]]:
    """Each metric as CloudWatch reads it: its own dimensions' values and its values."""
    metrics = [
        (name, {d: r[d] for d in dimensions if d != "service"}, r[name])
        for r in written
        for name, dimensions in directives(r).items()
    ]
    return sorted(metrics, key=lambda metric: (metric[0], sorted(metric[1].items())))


def a_turn(metrics: InvocationMetrics) -> None:
    metrics.timing("ModelLatency", 812.3456, connection="bedrock")
    metrics.count("ModelCalls", 1, connection="bedrock")
    metrics.count("ModelInputTokens", 120, connection="bedrock")
    metrics.count("TranscriptWriteFailed")
    metrics.count("Turns", 1, door="messages", outcome="not_recorded")


def test_an_invocations_metrics_are_one_record_with_each_metrics_own_dimensions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = InvocationMetrics()
    a_turn(metrics)
    assert records(capsys.readouterr().out) == []  # nothing before the door ends

    metrics.flush()

    [record] = records(capsys.readouterr().out)
    assert directives(record) == {
        "ModelLatency": ["connection", "service"],
        "ModelInputTokens": ["connection", "service"],
        "ModelCalls": ["connection", "service"],
        "TranscriptWriteFailed": ["service"],
        "Turns": ["door", "outcome", "service"],
    }
    assert {d["Namespace"] for d in record["_aws"]["CloudWatchMetrics"]} == {"ConvoMemory"}
    assert (record["ModelLatency"], record["ModelCalls"], record["Turns"]) == ([812.3], [1], [1])
    assert (record["connection"], record["service"]) == ("bedrock", "convo-memory")
    # The model's metrics share one directive: one set of dimensions is written once.
    assert len(record["_aws"]["CloudWatchMetrics"]) == 3
    assert (record["door"], record["outcome"]) == ("messages", "not_recorded")


def test_a_metric_counted_twice_is_two_values_of_one_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = InvocationMetrics()
    for _ in range(3):  # an agent turn's steps
        metrics.count("ModelCalls", 1, connection="bedrock")

    metrics.flush()

    [record] = records(capsys.readouterr().out)
    assert record["ModelCalls"] == [1, 1, 1]


def test_two_values_of_one_dimension_are_written_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = InvocationMetrics()
    metrics.count("TurnDeadlineReached", 1, kind="agent", outcome="partial")
    metrics.count("Turns", 1, door="predict", outcome="recorded")
    metrics.count("ModelCalls", 1, connection="a")
    metrics.count("ModelCalls", 1, connection="b")

    metrics.flush()

    written = records(capsys.readouterr().out)
    # Each metric under its own dimensions, every value kept, as few records as that takes.
    assert len(written) == 2
    assert published(written) == [
        ("ModelCalls", {"connection": "a"}, [1]),
        ("ModelCalls", {"connection": "b"}, [1]),
        ("TurnDeadlineReached", {"kind": "agent", "outcome": "partial"}, [1]),
        ("Turns", {"door": "predict", "outcome": "recorded"}, [1]),
    ]


def test_an_invocation_that_counted_nothing_writes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    InvocationMetrics().flush()

    assert capsys.readouterr().out == ""


def test_disabled_metrics_are_not_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = InvocationMetrics()
    metrics.count("Turns", 1, door="predict", outcome="recorded")

    metrics.flush()

    assert records(capsys.readouterr().out) == []


def test_invocations_on_two_threads_keep_their_own_metrics(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = InvocationMetrics()
    counted = threading.Barrier(2)

    def invocation(door: str) -> None:
        metrics.count("Turns", 1, door=door, outcome="recorded")
        counted.wait(5)  # both have counted before either writes
        metrics.flush()

    threads = [threading.Thread(target=invocation, args=(d,)) for d in ("predict", "stream")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)

    written = records(capsys.readouterr().out)
    assert sorted((r["door"], r["Turns"]) for r in written) == [("predict", [1]), ("stream", [1])]


def test_a_long_invocation_writes_before_a_record_would_overflow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = InvocationMetrics()
    for _ in range(observability.MAX_SAMPLES + 1):
        metrics.count("SummaryMessagesFolded", 2)

    written = records(capsys.readouterr().out)
    assert sum(len(r["SummaryMessagesFolded"]) for r in written) == observability.MAX_SAMPLES
    metrics.flush()
    assert records(capsys.readouterr().out)[0]["SummaryMessagesFolded"] == [2]


@pytest.mark.parametrize("decorate", [http_handler, job_handler])
def test_a_failed_invocation_still_writes_its_record(
    decorate: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    @decorate
    def handler(event: Any, context: Any) -> Any:
        observability.metrics.count("Turns", 1, door="predict", outcome="internal")
        raise RuntimeError("the handler failed")

    with pytest.raises(RuntimeError):
        handler({"requestContext": {"requestId": "api-1"}}, Context())

    [record] = records(capsys.readouterr().out)
    assert (record["Turns"], record["outcome"]) == ([1], "internal")


def test_a_turns_line_names_the_function_the_request_and_the_turn_and_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(observability.logger.registered_handler, "stream", stream)

    @http_handler
    def handler(event: Any, context: Any) -> Any:
        with observability.turn_count(InvocationMetrics(), "messages") as count:
            return count.served(served())

    handler({"requestContext": {"requestId": "api-7"}}, Context())
    observability.logger.info("after the invocation")

    line, after = (json.loads(text) for text in stream.getvalue().splitlines())
    assert line == {
        "level": "INFO",
        "message": "turn served",
        "service": "convo-memory",
        "function_name": "PredictFunction",
        "function_request_id": "req-lambda-1",
        "correlation_id": "api-7",
        "door": "messages",
        "outcome": "recorded",
        "sessionId": "ses_1",
    }
    # The log group and Lambda's REPORT line say the rest (ARN, memory, cold start), and
    # the turn's line always comes from one place (no location).
    assert after["location"] and "function_name" not in after and "correlation_id" not in after
