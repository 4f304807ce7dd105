"""RepairFunction on its queue: a failed repair comes back within seconds (2, 4, 8 ...
60 s by its receive count, not the queue's six-minute visibility), and a body that is no
RepairJob is failed (on to RepairDLQ) and counted, never silently dropped."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from local_runtime.queue_pollers import sqs_event
from tests.support.faults import dynamodb_error, inject, is_turn_put
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant

APP = Path(__file__).resolve().parents[2] / "functions" / "repair_transcript" / "app.py"


def _worker() -> Any:
    spec = importlib.util.spec_from_file_location("repair_worker_under_test", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _receive(api: InProcessApi) -> dict[str, Any]:
    sqs = api.container.infrastructure.clients["sqs"]
    url = api.container.settings.repair_queue_url
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    ).get("Messages", [])
    return sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:RepairQueue")


def test_the_redelivery_delay_doubles_up_to_a_minute() -> None:
    delays = [_worker().worker.redeliver_seconds(count) for count in range(1, 9)]
    assert delays == [2, 4, 8, 16, 32, 60, 60, 60]


def test_a_failed_repair_is_made_visible_again_within_seconds(
    api: InProcessApi, tenant: Tenant
) -> None:
    client = api.container.infrastructure.clients["dynamodb"]
    inject(
        client,
        "PutItem",
        lambda p: dynamodb_error("ThrottlingException", 400) if is_turn_put(p) else None,
    )
    body = {"capabilityId": "cap-generative", "externalRef": "r"}
    session_id = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body).body["id"]
    turn = {"input": "land me later", "sessionId": session_id}
    answer = api.call(
        "POST", "/v1/capabilities/cap-generative/predict", token=tenant.token, json_body=turn
    )
    assert answer.status == 200 and answer.body["recorded"] is False
    timeouts: list[int] = []
    api.container.infrastructure.clients["sqs"].meta.events.register(
        "provide-client-params.sqs.ChangeMessageVisibility",
        lambda params, **_: timeouts.append(params["VisibilityTimeout"]),
    )

    event = _receive(api)
    result = api.invoke("RepairFunction", event)

    assert result == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    assert timeouts == [2]  # its first delivery: back in 2 s, not 360


def test_a_body_that_is_no_repair_job_is_failed_and_counted(
    api: InProcessApi, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    sqs = api.container.infrastructure.clients["sqs"]
    url = api.container.settings.repair_queue_url
    sqs.send_message(QueueUrl=url, MessageBody="not a job")
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"workspaceId": "ws-1"}))
    event = _receive(api)

    result = api.invoke("RepairFunction", event)

    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    assert failed == {record["messageId"] for record in event["Records"]}
    assert '"RepairJobsMalformed"' in capsys.readouterr().out  # the EMF metric
    logged = [r.getMessage() for r in caplog.records if "no RepairJob" in r.getMessage()]
    assert len(logged) == 2  # one error line each
