"""Figure 16: what erasing an end user costs, with 10 and with 100 sessions.

On the in-process stack (moto, the real handlers and worker): an end user whose sessions
are half generative, half agent, each with two turns (one with an Idempotency-Key; an
agent turn leaves a run trace); then ``POST /v1/erasures`` and the ErasureQueue's jobs,
the delayed sweeps included, until the receipt is ``done`` and nothing is queued. Counted
from the request on: DynamoDB requests by operation and capacity units as DynamoDB bills
them (``bench.capacity``, a transaction's items doubled), SQS messages sent, and Lambda
invocations by function (the authorizer's for the request included). Traces kept (the
default) and erased.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.prices import (
    LAMBDA_USD_PER_MILLION_REQUESTS,
    SQS_USD_PER_MILLION_REQUESTS,
)

ROOT = Path(__file__).resolve().parent.parent
SIZES = (10, 100)
TURNS_PER_SESSION = 2


def erasure_figure(
    progress: Callable[[str], None], sizes: tuple[int, ...] = SIZES
) -> dict[str, Any]:
    """Figure 16 (see the module docstring)."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from tests.support.erasure_jobs import run_erasure_jobs
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    rows: list[dict[str, Any]] = []
    # The job's last listing waits for the index to settle: not on the bench's clock.
    with inprocess_stack(sleep=lambda seconds: None) as api:
        meter = CapacityMeter(
            api.container.infrastructure.clients["dynamodb"],
            boto3.client("dynamodb", region_name="us-east-1"),
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )
        sent: Counter[str] = Counter()
        api.container.infrastructure.clients["sqs"].meta.events.register(
            "before-call.sqs.SendMessage", lambda **_: sent.update(["SendMessage"])
        )
        invoked: Counter[str] = Counter()
        invoke = api.invoke

        def counted(function: str, event: dict[str, Any]) -> Any:
            invoked[function] += 1
            return invoke(function, event)

        api.invoke = counted  # type: ignore[method-assign]
        for traces in ("keep", "erase"):
            for size in sizes:
                progress(f"erasing an end user with {size} sessions (traces {traces})")
                _, token = new_workspace(api, f"erase-{traces}-{size}")
                ref = f"bench-{traces}-{size}"
                runs = _end_user(api, token, ref, size)
                meter.reset()
                sent.clear()
                invoked.clear()
                answer = api.call(
                    "POST",
                    "/v1/erasures",
                    token=token,
                    json_body={"externalRef": ref, "traces": traces},
                )
                jobs = run_erasure_jobs(api, sweeps=True)
                units = meter.reset().to_dict()
                lambdas, sqs = dict(invoked), sent["SendMessage"]
                receipt = api.call("GET", f"/v1/erasures/{answer.body['id']}", token=token).body
                if receipt["status"] != "done" or receipt["sessionsErased"] != size:
                    raise RuntimeError(f"erasure not done: {receipt}")
                rows.append(
                    {
                        "sessions": size,
                        "traces": traces,
                        "runs": runs,
                        "tracesErased": receipt["tracesErased"],
                        "tracesKept": receipt["tracesKept"],
                        "dynamodb": units,
                        "sqsMessagesSent": sqs,
                        "jobs": Counter(job["kind"] for job in jobs),
                        "lambdaInvocations": lambdas,
                        "usd": _dollars(units, sqs, sum(lambdas.values())),
                    }
                )
    return {"turnsPerSession": TURNS_PER_SESSION, "rows": rows}


def _end_user(api: Any, token: str, ref: str, sessions: int) -> int:
    """``sessions`` sessions of ``ref``, half agent: their turns (one keyed each), and how
    many run traces they left."""
    runs = 0
    for n in range(sessions):
        capability = "cap-agent" if n % 2 else "cap-generative"
        opened = api.call(
            "POST",
            "/v1/sessions",
            token=token,
            json_body={"capabilityId": capability, "externalRef": ref},
        )
        session_id = opened.body["id"]
        for turn in range(TURNS_PER_SESSION):
            answered = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": "Where is order 12345?"},
                headers={"Idempotency-Key": f"{session_id}-{turn}"} if turn == 0 else {},
            )
            if answered.status != 200:
                raise RuntimeError(f"turn failed: {answered.status} {answered.body}")
            runs += 1 if answered.body.get("runId") else 0
    return runs


def _dollars(units: dict[str, Any], sqs_sends: int, invocations: int) -> float:
    """DynamoDB units, SQS requests (sends; the event source's receives and deletes are
    about two more per message) and Lambda requests, at published prices. Lambda
    duration is left out: it is the handler time, which moto in process does not show."""
    sqs_requests = sqs_sends * 3
    return (
        units["dollarsPerMillion"]
        + sqs_requests * SQS_USD_PER_MILLION_REQUESTS
        + invocations * LAMBDA_USD_PER_MILLION_REQUESTS
    ) / 1_000_000


def render_erasure(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    from bench.stats import num, ops_text

    rows = []
    for row in figure["rows"]:
        units = row["dynamodb"]
        lambdas = row["lambdaInvocations"]
        rows.append(
            [
                row["sessions"],
                row["traces"],
                f"{row['tracesErased'] or row['tracesKept']}",
                sum(units["requests"].values()),
                num(units["readUnits"], 1),
                num(units["tableWriteUnits"] + units["indexWriteUnits"], 1),
                row["sqsMessagesSent"],
                sum(lambdas.values()),
                f"${row['usd'] * 1000:.3f}",
            ]
        )
    details = []
    for row in figure["rows"]:
        lambdas = ", ".join(f"{name} {n}" for name, n in sorted(row["lambdaInvocations"].items()))
        requests = ops_text(row["dynamodb"]["requests"])
        details.append(
            f"{row['sessions']} sessions, traces {row['traces']}: {requests}; Lambda {lambdas}"
        )
    return "\n".join(
        [
            title,
            f"half generative, half agent sessions, {figure['turnsPerSession']} turns each (one"
            " with an Idempotency-Key); from the request until the receipt is done and the"
            " delayed sweeps ran",
            "",
            table(
                [
                    "sessions",
                    "traces",
                    "runs",
                    "DynamoDB req",
                    "RRU",
                    "WRU",
                    "SQS sent",
                    "Lambda",
                    "USD per 1,000 erasures",
                ],
                rows,
            ),
            *details,
            "USD: DynamoDB units, SQS requests (a send and about two event-source requests per"
            " message) and Lambda requests at published prices; Lambda duration not included.",
        ]
    )
