"""Figure 10's arithmetic: a million turns priced by component from measured counts."""

from __future__ import annotations

import os
from typing import Any

import pytest

from bench.costs import (
    LOG_BYTES_BUDGET,
    PLATFORM_LOG_BYTES,
    FunctionLedger,
    access_log_line_bytes,
    million_turns,
)
from bench.render import render, render_million_turns


def side(functions: dict[str, dict[str, float]], **counts: float) -> dict[str, Any]:
    return {
        "readUnits": counts.get("read", 0.0),
        "writeUnits": counts.get("write", 0.0),
        "sqsRequests": counts.get("sqs", 0.0),
        "functions": functions,
        "dollars": {"model": counts.get("model", 0.0)},
    }


SUMMARY_COST = {
    "turns": 100,
    "turn": side(
        {
            "AuthorizerFunction": {"invocations": 1.0, "billedMs": 1.0, "logBytes": 0.0},
            "PredictFunction": {
                "invocations": 1.0,
                "billedMs": 20.0,
                "logBytes": 1000.0,
                "metricRecords": 1.0,
                "metricBytes": 450.0,
            },
        },
        read=2.0,
        write=2.0,
        model=0.0015,
    ),
    "summary": side(
        {"SummarizeFunction": {"invocations": 0.2, "billedMs": 4.0, "logBytes": 200.0}},
        read=0.4,
        write=0.2,
        sqs=0.6,
        model=0.0003,
    ),
}
MEMORY = {"AuthorizerFunction": 512, "PredictFunction": 1024, "SummarizeFunction": 512}


def by_component(figure: dict[str, Any]) -> dict[str, float]:
    return {c["component"]: c["usd"] for c in figure["components"]}


def test_each_component_is_its_measured_count_times_its_published_price() -> None:
    figure = million_turns(SUMMARY_COST, MEMORY, access_log_bytes=300)
    usd = by_component(figure)

    assert usd["Lambda requests"] == pytest.approx(2.2 * 0.20)
    # 1 ms x 0.5 GB + 20 ms x 1 GB + 4 ms x 0.5 GB = 22.5 GB-ms per turn.
    assert usd["Lambda duration"] == pytest.approx(0.0225 * 1e6 * 0.0000133334)
    assert usd["API Gateway"] == pytest.approx(1.00)
    assert usd["DynamoDB"] == pytest.approx(2.4 * 0.125 + 2.2 * 0.625)
    assert usd["SQS"] == pytest.approx(0.6 * 0.40)
    log_bytes = 1200 + 2.2 * PLATFORM_LOG_BYTES + 300
    assert usd["CloudWatch Logs"] == pytest.approx(log_bytes * 1e6 / 1024**3 * 0.50)
    assert figure["totalUsd"] == pytest.approx(sum(usd.values()))
    assert figure["modelUsd"] == pytest.approx(1800)
    # The turn's own function, at 1 GB: each second of model wait is 1M GB-seconds.
    assert figure["servingFunction"] == "PredictFunction"
    assert figure["perModelSecondUsd"] == pytest.approx(1e6 * 0.0000133334)


def test_the_access_log_line_is_the_templates_format_with_every_variable_filled() -> None:
    fmt = '{"requestId":"$context.requestId",\n "status":"$context.status"}'

    size = access_log_line_bytes(fmt)

    assert size == len('{"requestId":"Kx1c9jcrIAMEV7Q=", "status":"200"}') + 1


def test_the_platform_lines_are_lambdas_start_end_and_report() -> None:
    assert 150 < PLATFORM_LOG_BYTES < 400


class Registry:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def invoke(self, function: str, event: Any) -> Any:
        self.calls.append(function)
        # What Lambda ships to CloudWatch is what the process writes to its stdout.
        os.write(1, f"log line of {function}\n".encode())
        if event == "boom":
            raise RuntimeError("handler failed")
        return {"ok": function}


def test_the_ledger_counts_times_and_weighs_each_invocations_log(
    capfd: pytest.CaptureFixture[str],
) -> None:
    registry = Registry()
    ledger = FunctionLedger().attach(registry)

    assert registry.invoke("PredictFunction", {}) == {"ok": "PredictFunction"}
    with pytest.raises(RuntimeError):
        registry.invoke("PredictFunction", "boom")
    registry.invoke("AuthorizerFunction", {})

    uses = ledger.reset()
    assert registry.calls == ["PredictFunction", "PredictFunction", "AuthorizerFunction"]
    assert uses["PredictFunction"].invocations == 2
    assert uses["PredictFunction"].billed_ms >= 2  # at least 1 ms each, as Lambda bills
    assert uses["PredictFunction"].log_bytes == 2 * len("log line of PredictFunction\n")
    assert uses["AuthorizerFunction"].log_bytes == len("log line of AuthorizerFunction\n")
    assert ledger.reset() == {}
    # The captured output still reaches stdout.
    assert capfd.readouterr().out.count("log line of PredictFunction") == 2


def test_the_figure_prints_every_component_and_the_model_apart() -> None:
    figure = million_turns(SUMMARY_COST, MEMORY, access_log_bytes=300)

    text = render_million_turns(figure)

    assert text.startswith("10. A million turns by component")
    for component in ("Lambda requests", "Lambda duration", "API Gateway", "DynamoDB", "SQS"):
        assert component in text
    assert "CloudWatch Logs" in text
    assert f"${figure['totalUsd']:,.2f}" in text
    assert "$13.33 per M turns of PredictFunction duration" in text
    assert "$1,800.00 per M turns" in text


def test_the_report_carries_the_figure_after_the_others() -> None:
    meta = {"quick": True, "python": "3.13.0", "cpus": 2, "seconds": 1.0, "plan": {}}
    figure = million_turns(SUMMARY_COST, MEMORY, access_log_bytes=300)

    assert "10. A million turns by component" in render({"meta": meta, "millionTurns": figure})
    assert "10. A million turns" not in render({"meta": meta})


class MeteredRegistry:
    """A function that logs a line and, when it ends, one EMF metrics record."""

    def invoke(self, function: str, event: Any) -> Any:
        os.write(1, b'{"level":"INFO","message":"turn served"}\n')
        os.write(1, b'{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"Turns":[1.0]}\n')
        return {}


def test_the_ledger_weighs_the_metrics_records_apart(capfd: pytest.CaptureFixture[str]) -> None:
    registry = MeteredRegistry()
    ledger = FunctionLedger().attach(registry)

    registry.invoke("PredictFunction", {})
    registry.invoke("PredictFunction", {})

    use = ledger.reset()["PredictFunction"]
    record = len('{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"Turns":[1.0]}\n')
    assert (use.metric_records, use.metric_bytes) == (2, 2 * record)
    assert use.log_bytes == 2 * (record + len('{"level":"INFO","message":"turn served"}\n'))


def test_the_figure_holds_the_functions_log_bytes_to_the_budget() -> None:
    figure = million_turns(SUMMARY_COST, MEMORY, access_log_bytes=300)

    text = render_million_turns(figure)

    assert LOG_BYTES_BUDGET == 1_000
    assert figure["logBytes"]["metrics"] == 450
    assert "log bytes per turn: functions 1,200 (OVER the budget of 1,000" in text
    assert (
        "EMF metrics records per invocation: AuthorizerFunction 0.00, PredictFunction 1.00" in text
    )
    lean = {
        **SUMMARY_COST,
        "summary": side(
            {"SummarizeFunction": {"invocations": 0.2, "billedMs": 4.0, "logBytes": 0.0}}
        ),
    }
    assert "functions 1,000 (within the budget of 1,000" in render_million_turns(
        million_turns(lean, MEMORY, access_log_bytes=300)
    )
