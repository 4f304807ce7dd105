"""One correlation id follows a turn into the SQS jobs it causes, read from the local
runtime's captured logs (the functions' JSON lines on its stdout).

The turn's transcript write fails (``LOCAL_TURN_WRITES_FAIL_WHILE``: the emulation answers
turn writes with DynamoDB's 500 while a file exists), so the turn is answered with
``recorded: false`` and queued for repair; the repair lands it once the file is gone and
asks for a summary run. The turn's line, the repair's and the summary job's carry the
API request's id.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.runtime_process import RuntimeProcess, lend_workspace, shared_turn_writes_outage
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

WAIT_SECONDS = 30.0


def log_records(runtime: RuntimeProcess) -> list[dict[str, Any]]:
    """The structured log lines the functions printed so far."""
    records = []
    for line in [*runtime.stdout_lines, *runtime.stderr_lines]:
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def the_line(runtime: RuntimeProcess, message: str, session_id: str) -> dict[str, Any] | None:
    for record in log_records(runtime):
        if record.get("message") == message and record.get("sessionId") == session_id:
            return record
    return None


def test_a_turn_its_repair_and_its_summary_job_log_one_correlation_id(
    local_runtime: RuntimeProcess,
) -> None:
    # The shared runtime, in a workspace of the test's own; its turn writes fail while
    # ``outage`` exists (the lines read below are this session's only).
    runtime, token, outage = local_runtime, lend_workspace(), shared_turn_writes_outage()
    status, _, capability = runtime.call(
        "POST",
        "/v1/capabilities",
        token=token,
        json={"name": "correlated", "kind": "generative"},
    )
    assert status == 201, capability
    status, _, session = runtime.call(
        "POST",
        "/v1/sessions",
        token=token,
        json={"capabilityId": capability["id"], "externalRef": "customer-correlated"},
    )
    assert status == 201, session
    session_id = session["id"]

    outage.touch()
    try:
        status, headers, turn = runtime.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=token,
            json={"input": "my order number is 7781"},
        )
    finally:
        outage.unlink()  # the runtime is shared: its writes work again whatever happened
    assert status == 200, turn
    assert turn["recorded"] is False  # the write failed; the answer still came back

    served = wait_for(
        lambda: the_line(runtime, "turn served", session_id), WAIT_SECONDS, "the turn's line"
    )
    repaired = wait_for(
        lambda: the_line(runtime, "transcript repair", session_id),
        WAIT_SECONDS,
        "the repair's line",
    )
    summarized = wait_for(
        lambda: the_line(runtime, "summary job done", session_id),
        WAIT_SECONDS,
        "the summary job's line",
    )

    request_id = headers["apigw-requestid"]
    assert served["correlation_id"] == request_id
    assert served["outcome"] == "not_recorded" and served["door"] == "messages"
    assert repaired["correlation_id"] == request_id and repaired["outcome"] == "recorded"
    assert summarized["correlation_id"] == request_id
    # Three functions, one service name: one query finds the whole story.
    assert {served["function_name"], repaired["function_name"], summarized["function_name"]} == {
        "PredictFunction",
        "RepairFunction",
        "SummarizeFunction",
    }
    assert {served["service"], repaired["service"], summarized["service"]} == {"convo-memory"}
    status, _, messages = runtime.call("GET", f"/v1/sessions/{session_id}/messages", token=token)
    assert status == 200, messages
    assert [m["content"] for m in messages["messages"]][:1] == ["my order number is 7781"]
