"""Figure 7: what the rolling summary costs per turn, next to the turn's own cost, over
one conversation at a human pace (each turn arrives after the previous one's summary job
has run: the coalescing window and the queue delay are set to 0, which at a human pace
changes nothing).

The capability calls a fake OpenAI-compatible model on 127.0.0.1 (its own model also
summarizes, as by default), so model calls and their sizes are real HTTP requests. Per
turn, the turn's own requests are measured apart from the summary's:

- model calls, and tokens estimated as characters / 4 (prompt and answer);
- DynamoDB requests and capacity units (``bench.capacity.CapacityMeter`` on the
  functions' client, reset around each turn and each summary job);
- SQS requests: the trigger's SendMessage, and the event source mapping's ReceiveMessage
  that returned the job and its DeleteMessageBatch (an event source mapping's empty
  polls cost the same whatever the traffic: they are not counted);
- Lambda invocations, counted by ``bench.costs.FunctionLedger`` with their handler
  time and log bytes: the authorizer (it runs on every request) and the turn's function
  for the turn, SummarizeFunction for the summary.

Prices (bench/prices.py): DynamoDB on-demand, SQS standard $0.40 per million requests,
Lambda $0.20 per million requests (duration is priced in figure 10: both sides mostly
wait on their model call), and a model at $0.80 per million input tokens and $4 per
million output tokens (Claude 3.5 Haiku on Bedrock, us-east-1, as a reference).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.costs import FunctionLedger, FunctionUse
from bench.model_session import model_session
from bench.prices import (
    DYNAMODB_USD_PER_MILLION_READ_UNITS,
    DYNAMODB_USD_PER_MILLION_WRITE_UNITS,
    LAMBDA_USD_PER_MILLION_REQUESTS,
    MODEL_USD_PER_MILLION_INPUT_TOKENS,
    MODEL_USD_PER_MILLION_OUTPUT_TOKENS,
    SQS_USD_PER_MILLION_REQUESTS,
)

ROOT = Path(__file__).resolve().parent.parent
CHARS_PER_TOKEN = 4
SHARE_LIMIT = 1 / 3
SUMMARY_MARK = "rolling summary of a conversation"


@dataclass
class Side:
    """What one side (the turns, or the summary) spent over the conversation."""

    model_calls: int = 0
    input_chars: int = 0
    output_chars: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    dynamo_requests: int = 0
    sqs_requests: int = 0
    functions: dict[str, FunctionUse] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def lambda_invocations(self) -> int:
        return sum(use.invocations for use in self.functions.values())

    def add_functions(self, uses: dict[str, FunctionUse]) -> None:
        for name, use in uses.items():
            self.functions.setdefault(name, FunctionUse()).add(use)

    def add_units(self, units: Any) -> None:
        self.read_units += units.read_units
        self.write_units += units.table_write_units + units.index_write_units
        for op, n in units.requests.items():
            self.ops[op] = self.ops.get(op, 0) + n
            self.dynamo_requests += n

    def per_turn(self, turns: int) -> dict[str, Any]:
        input_tokens = self.input_chars / CHARS_PER_TOKEN / turns
        output_tokens = self.output_chars / CHARS_PER_TOKEN / turns
        dollars = {
            "dynamodb": (
                self.read_units * DYNAMODB_USD_PER_MILLION_READ_UNITS
                + self.write_units * DYNAMODB_USD_PER_MILLION_WRITE_UNITS
            )
            / turns
            / 1e6,
            "sqs": self.sqs_requests * SQS_USD_PER_MILLION_REQUESTS / turns / 1e6,
            "lambda": self.lambda_invocations * LAMBDA_USD_PER_MILLION_REQUESTS / turns / 1e6,
            "model": (
                input_tokens * MODEL_USD_PER_MILLION_INPUT_TOKENS
                + output_tokens * MODEL_USD_PER_MILLION_OUTPUT_TOKENS
            )
            / 1e6,
        }
        dollars["total"] = sum(dollars.values())
        return {
            "modelCalls": self.model_calls / turns,
            "modelInputTokens": input_tokens,
            "modelOutputTokens": output_tokens,
            "dynamoRequests": self.dynamo_requests / turns,
            "dynamoOps": {op: n / turns for op, n in sorted(self.ops.items())},
            "readUnits": self.read_units / turns,
            "writeUnits": self.write_units / turns,
            "dynamoUnits": (self.read_units + self.write_units) / turns,
            "sqsRequests": self.sqs_requests / turns,
            "lambdaInvocations": self.lambda_invocations / turns,
            "functions": {
                name: {
                    "invocations": use.invocations / turns,
                    "billedMs": use.billed_ms / turns,
                    "logBytes": use.log_bytes / turns,
                    "metricRecords": use.metric_records / turns,
                    "metricBytes": use.metric_bytes / turns,
                }
                for name, use in sorted(self.functions.items())
            },
            "dollars": dollars,
        }


class FakeModel:
    """Answers turns with about 400 characters and summaries with about 900, and counts
    the characters it answered, by kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.output_chars = {"turn": 0, "summary": 0}

    def respond(self, body: Any) -> str:
        system = body["messages"][0]["content"]
        if SUMMARY_MARK in system:
            kind = "summary"
            answer = (
                "The user is Ada Lovelace (ada@example.com). Order 48213, placed 2025-03-03, "
                "is late; she wants a refund of $49.99 unless it ships by Friday. " * 6
            )[:900]
        else:
            kind = "turn"
            question = body["messages"][-1]["content"]
            answer = f"About '{question[:80]}': " + "here is what I found. " * 15
        with self.lock:
            self.output_chars[kind] += len(answer)
        return answer


def _share(summary: float, turn: float) -> float | None:
    total = summary + turn
    return summary / total if total else None


def summary_cost(turns: int = 100, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Per-turn cost of the turns and of their rolling summary, over ``turns`` turns."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from tests.support.inprocess_api import REGION
    from tests.support.summary_jobs import SummaryJobs

    fake = FakeModel()
    turn_side, summary_side = Side(), Side()
    gaps = 0
    with model_session("bench-summary", fake.respond) as (server, api, token, session_id):
        dynamodb = api.container.infrastructure.clients["dynamodb"]
        side_client = boto3.client("dynamodb", region_name=REGION)
        meter = CapacityMeter(
            dynamodb, side_client, table_specs(ROOT / "template.yaml", api.resources.tables)
        )
        sends = _count_calls(api.container.infrastructure.clients["sqs"], "SendMessage")
        ledger = FunctionLedger().attach(api.registry)
        jobs = SummaryJobs(api)
        # The event source's receives that returned a job (one per invocation).
        job_receives = 0
        job_deletes = _count_calls(jobs.sqs, "DeleteMessageBatch")
        seen_requests = 0
        for i in range(1, turns + 1):
            question = f"Turn {i}: and what about the other order, can you check it?"
            meter.reset()
            ledger.reset()
            sends_before = sends()
            answer = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": question.ljust(120, ".")},
            )
            if answer.status != 200 or not answer.body["recorded"]:
                raise RuntimeError(f"turn {i} failed: {answer.status} {answer.body}")
            turn_side.add_units(meter.reset())
            turn_side.add_functions(ledger.reset())
            summary_side.sqs_requests += sends() - sends_before
            context = answer.body["context"]
            gaps += _gap(server.requests[seen_requests:], context["omittedMessages"])

            invocations = jobs.invocations
            jobs.run_pending()
            summary_side.add_units(meter.reset())
            summary_side.add_functions(ledger.reset())
            job_receives += jobs.invocations - invocations
            for request in server.requests[seen_requests:]:
                side = summary_side if _is_summary(request) else turn_side
                side.model_calls += 1
                side.input_chars += sum(len(m["content"]) for m in request.body["messages"])
            seen_requests = len(server.requests)
            if progress and i % 25 == 0:
                progress(f"summary cost: {i} of {turns} turns")
        summary_side.sqs_requests += job_receives + job_deletes()
        turn_side.output_chars = fake.output_chars["turn"]
        summary_side.output_chars = fake.output_chars["summary"]
        view = api.call("GET", f"/v1/sessions/{session_id}/context", token=token).body
    turn = turn_side.per_turn(turns)
    summary = summary_side.per_turn(turns)
    shares = {
        key: _share(summary[key], turn[key])
        for key in (
            "modelCalls",
            "dynamoRequests",
            "dynamoUnits",
            "sqsRequests",
            "lambdaInvocations",
        )
    }
    shares["modelTokens"] = _share(
        summary["modelInputTokens"] + summary["modelOutputTokens"],
        turn["modelInputTokens"] + turn["modelOutputTokens"],
    )
    shares["dollars"] = _share(summary["dollars"]["total"], turn["dollars"]["total"])
    # Without the model: what the serverless plumbing of the summary costs.
    infrastructure = ("dynamodb", "sqs", "lambda")
    shares["infrastructureDollars"] = _share(
        sum(summary["dollars"][k] for k in infrastructure),
        sum(turn["dollars"][k] for k in infrastructure),
    )
    return {
        "turns": turns,
        "batchTurns": api.container.settings.summary_batch_turns,
        "replayMessages": 20,
        "turn": turn,
        "summary": summary,
        "summaryShare": shares,
        "shareLimit": SHARE_LIMIT,
        "turnsWithAGap": gaps,
        "finalThroughSeq": (view.get("summary") or {}).get("throughSeq"),
        "finalOmitted": view.get("omittedMessages"),
        "prices": {
            "sqsPerMillion": SQS_USD_PER_MILLION_REQUESTS,
            "lambdaPerMillion": LAMBDA_USD_PER_MILLION_REQUESTS,
            "modelInputPerMillionTokens": MODEL_USD_PER_MILLION_INPUT_TOKENS,
            "modelOutputPerMillionTokens": MODEL_USD_PER_MILLION_OUTPUT_TOKENS,
        },
    }


def _count_calls(client: Any, operation: str) -> Callable[[], int]:
    count = [0]

    def counted(**_: Any) -> None:
        count[0] += 1

    client.meta.events.register(f"before-call.sqs.{operation}", counted)
    return lambda: count[0]


def _is_summary(request: Any) -> bool:
    return SUMMARY_MARK in request.body["messages"][0]["content"]


def _gap(requests: list[Any], omitted: int) -> int:
    """1 when the turn's prompt held a summary short of what its window omitted."""
    for request in requests:
        if _is_summary(request):
            continue
        found = re.findall(
            r'kind="summary" through-seq="(\d+)"', request.body["messages"][0]["content"]
        )
        covered = int(found[0]) if found else 0
        return 1 if covered < omitted else 0
    return 0
