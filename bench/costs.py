"""Figure 10: a million turns by component, priced from counts measured in figure 8.

Figure 8 serves a 100-turn conversation at a human pace through the in-process stack
(the uncached authorizer, the turn function, the summary jobs) and counts, per turn:
DynamoDB capacity units, SQS requests, and through :class:`FunctionLedger` every Lambda
invocation, its handler time and the bytes it wrote to its log. This module prices
those counts:

- Lambda: requests, and duration as Lambda bills it (each invocation rounded up to the
  millisecond, times the function's memory from template.yaml). The handler time is
  measured here with moto in process and a local model answering at once; on AWS a turn
  also waits for its model and DynamoDB's network round trips, so the figure adds the
  cost of each second of model latency beside it;
- API Gateway: one HTTP API request per turn (the turn's answer is far below 512 KB);
- DynamoDB and SQS: the measured units and requests;
- CloudWatch Logs: the bytes the functions wrote (Powertools' JSON lines, and the one
  EMF metrics record each invocation writes when it ends), Lambda's own START/END/REPORT
  lines per invocation, and one access-log line per request in the template's format.
  The functions' share is held to ``LOG_BYTES_BUDGET`` per turn.

The model is the customer's: it is shown apart, at a reference price.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.prices import (
    DYNAMODB_USD_PER_MILLION_READ_UNITS,
    DYNAMODB_USD_PER_MILLION_WRITE_UNITS,
    HTTP_API_USD_PER_MILLION_REQUESTS,
    LAMBDA_ARM_USD_PER_GB_SECOND,
    LAMBDA_USD_PER_MILLION_REQUESTS,
    LOGS_USD_PER_GB_INGESTED,
    SQS_USD_PER_MILLION_REQUESTS,
)

TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"
MILLION = 1_000_000
GB = 1024**3
# What the functions may write to their logs per turn (the turn's lines and metrics, and
# its share of the summary job's).
LOG_BYTES_BUDGET = 1_000
# How a line of EMF metrics starts (Powertools writes the ``_aws`` member first).
EMF_PREFIX = b'{"_aws":'
REQUEST_ID = "8f507cfc-5b2e-4b5a-9c3d-0123456789ab"
# Lambda's own lines per invocation in its text log format (the template's default).
PLATFORM_LINES = (
    f"START RequestId: {REQUEST_ID} Version: $LATEST\n",
    f"END RequestId: {REQUEST_ID}\n",
    f"REPORT RequestId: {REQUEST_ID}\tDuration: 123.45 ms\tBilled Duration: 124 ms\t"
    "Memory Size: 512 MB\tMax Memory Used: 118 MB\t\n",
)
PLATFORM_LOG_BYTES = sum(len(line.encode()) for line in PLATFORM_LINES)
# What the access log's $context variables become for a turn.
ACCESS_LOG_VALUES = {
    "$context.requestId": "Kx1c9jcrIAMEV7Q=",
    "$context.identity.sourceIp": "203.0.113.17",
    "$context.httpMethod": "POST",
    "$context.routeKey": "POST /v1/sessions/{sessionId}/messages",
    "$context.status": "200",
    "$context.protocol": "HTTP/1.1",
    "$context.responseLength": "1432",
    "$context.integrationErrorMessage": "-",
    "$context.authorizer.error": "-",
    "$context.responseLatency": "1843",
}


def access_log_line_bytes(log_format: str) -> int:
    """The bytes of one access-log line: the template's format with a turn's values."""
    line = " ".join(log_format.split())
    # Longest names first: $context.requestId must not eat $context.responseLength.
    for name in sorted(ACCESS_LOG_VALUES, key=len, reverse=True):
        line = line.replace(name, ACCESS_LOG_VALUES[name])
    return len(line.encode()) + 1


@dataclass
class FunctionUse:
    """One function's invocations, billed milliseconds and log bytes (of which
    ``metric_bytes`` in ``metric_records`` EMF records)."""

    invocations: int = 0
    billed_ms: int = 0
    log_bytes: int = 0
    metric_records: int = 0
    metric_bytes: int = 0

    def add(self, other: FunctionUse) -> None:
        self.invocations += other.invocations
        self.billed_ms += other.billed_ms
        self.log_bytes += other.log_bytes
        self.metric_records += other.metric_records
        self.metric_bytes += other.metric_bytes

    def weigh(self, output: bytes) -> None:
        """Count what one invocation wrote: every byte, and its EMF records apart."""
        self.log_bytes += len(output)
        for line in output.splitlines(keepends=True):
            if line.startswith(EMF_PREFIX):
                self.metric_records += 1
                self.metric_bytes += len(line)


@dataclass
class FunctionLedger:
    """Wraps an in-process stack's function registry: every invocation is counted, timed
    (rounded up to the millisecond, as Lambda bills) and its log captured (whatever the
    handler writes to file descriptor 1, which is what Lambda sends to CloudWatch Logs;
    under pytest's capture the loggers write elsewhere and weigh nothing). The captured
    output is written on afterwards, so nothing is hidden."""

    uses: dict[str, FunctionUse] = field(default_factory=dict)

    def attach(self, registry: Any) -> FunctionLedger:
        invoke: Callable[..., Any] = registry.invoke

        def ledgered(function: str, event: Any) -> Any:
            use = self.uses.setdefault(function, FunctionUse())
            sys.stdout.flush()
            saved = os.dup(1)
            with tempfile.TemporaryFile() as sink:
                os.dup2(sink.fileno(), 1)
                began = time.perf_counter()
                try:
                    return invoke(function, event)
                finally:
                    spent = time.perf_counter() - began
                    sys.stdout.flush()
                    os.dup2(saved, 1)
                    os.close(saved)
                    sink.seek(0)
                    output = sink.read()
                    os.write(1, output)
                    use.invocations += 1
                    use.billed_ms += max(1, math.ceil(spent * 1000))
                    use.weigh(output)

        registry.invoke = ledgered
        return self

    def reset(self) -> dict[str, FunctionUse]:
        measured, self.uses = self.uses, {}
        return measured


def million_turns(
    summary_cost: Mapping[str, Any], memory_mb: Mapping[str, int], access_log_bytes: int
) -> dict[str, Any]:
    """USD per million turns by component, from figure 8's per-turn counts (the turn and
    its share of the summary together)."""
    sides = (summary_cost["turn"], summary_cost["summary"])
    functions: dict[str, dict[str, float]] = {}
    for side in sides:
        for name, use in side["functions"].items():
            total = functions.setdefault(
                name, {"invocations": 0.0, "gbSeconds": 0.0, "metricRecords": 0.0}
            )
            total["invocations"] += use["invocations"]
            total["gbSeconds"] += use["billedMs"] / 1000 * memory_mb[name] / 1024
            total["metricRecords"] += use.get("metricRecords", 0.0)
    invocations = sum(f["invocations"] for f in functions.values())
    gb_seconds = sum(f["gbSeconds"] for f in functions.values())
    read_units = sum(side["readUnits"] for side in sides)
    write_units = sum(side["writeUnits"] for side in sides)
    sqs_requests = sum(side["sqsRequests"] for side in sides)
    uses = [use for side in sides for use in side["functions"].values()]
    function_log_bytes = sum(use["logBytes"] for use in uses)
    log_bytes = function_log_bytes + invocations * PLATFORM_LOG_BYTES + access_log_bytes
    components = [
        {
            "component": "Lambda requests",
            "perTurn": f"{invocations:.2f} invocations",
            "usd": invocations * LAMBDA_USD_PER_MILLION_REQUESTS,
        },
        {
            "component": "Lambda duration",
            "perTurn": f"{gb_seconds * 1000:.1f} GB-ms",
            "usd": gb_seconds * MILLION * LAMBDA_ARM_USD_PER_GB_SECOND,
        },
        {
            "component": "API Gateway",
            "perTurn": "1 request",
            "usd": HTTP_API_USD_PER_MILLION_REQUESTS,
        },
        {
            "component": "DynamoDB",
            "perTurn": f"{read_units:.2f} RRU + {write_units:.2f} WRU",
            "usd": read_units * DYNAMODB_USD_PER_MILLION_READ_UNITS
            + write_units * DYNAMODB_USD_PER_MILLION_WRITE_UNITS,
        },
        {
            "component": "SQS",
            "perTurn": f"{sqs_requests:.2f} requests",
            "usd": sqs_requests * SQS_USD_PER_MILLION_REQUESTS,
        },
        {
            "component": "CloudWatch Logs",
            "perTurn": f"{log_bytes:,.0f} bytes",
            "usd": log_bytes * MILLION / GB * LOGS_USD_PER_GB_INGESTED,
        },
    ]
    total = sum(c["usd"] for c in components)
    turn_functions = summary_cost["turn"]["functions"]
    serving = max(turn_functions, key=lambda name: turn_functions[name]["billedMs"])
    return {
        "turns": summary_cost["turns"],
        "components": components,
        "totalUsd": total,
        "functions": functions,
        "logBytes": {
            "functions": function_log_bytes,
            "metrics": sum(use.get("metricBytes", 0.0) for use in uses),
            "budget": LOG_BYTES_BUDGET,
            "platform": invocations * PLATFORM_LOG_BYTES,
            "accessLog": access_log_bytes,
        },
        "modelUsd": sum(side["dollars"]["model"] for side in sides) * MILLION,
        "servingFunction": serving,
        "perModelSecondUsd": memory_mb[serving] / 1024 * MILLION * LAMBDA_ARM_USD_PER_GB_SECOND,
    }


def cost_figure(summary_cost: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 10 from figure 8's measurements and the template's memory sizes and
    access-log format."""
    from local_runtime.aws_resources import function_specs, load_template

    memory = {name: spec.memory_size for name, spec in function_specs().items()}
    resources = load_template(TEMPLATE)["Resources"]
    log_format = next(
        r["Properties"]["AccessLogSettings"]["Format"]
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::HttpApi"
    )
    return million_turns(summary_cost, memory, access_log_line_bytes(log_format))
