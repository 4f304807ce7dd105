"""The workers' SQS batches: each record parsed into its job, only the failed ones
reported back, a body that is no job handed to the worker's choice; a failing record
comes back soon when its queue can say so (an SQS error leaves the visibility timeout in
force). (A worker's cold import, which takes neither pydantic nor Powertools' batch
utility, is checked in a fresh interpreter: tests/e2e/test_cold_imports.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.domain.errors import StoreUnavailable
from convo_memory.workers.batches import JobBatch, receive_count, redeliver_after
from convo_memory.workers.records import SummaryJobRecord

RECORD = SummaryJobRecord.model_validate(
    {
        "messageId": "m-1",
        "receiptHandle": "rh-1",
        "body": '{"workspaceId": "ws_1", "sessionId": "sess_1"}',
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1700000000000",
            "SenderId": "AIDA",
            "ApproximateFirstReceiveTimestamp": "1700000000000",
        },
        "messageAttributes": {},
        "md5OfBody": "99914b932bd37a50b983c5e7c90ae93b",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:Q",
        "awsRegion": "us-east-1",
    }
)


class Queue:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.error = error

    def redeliver_after(self, receipt_handle: str, seconds: int) -> None:
        self.calls.append((receipt_handle, seconds))
        if self.error is not None:
            raise self.error


def test_the_record_is_made_visible_again_after_the_given_seconds() -> None:
    queue = Queue()

    redeliver_after(queue, RECORD, 8)

    assert queue.calls == [("rh-1", 8)]


def test_an_sqs_error_is_logged_and_the_visibility_timeout_applies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = Queue(StoreUnavailable("SQS visibility change failed"))

    redeliver_after(queue, RECORD, 8)  # does not raise: the record fails either way

    assert queue.calls == [("rh-1", 8)]
    assert "could not shorten the job's visibility" in caplog.text


@pytest.mark.parametrize("queue", [None, object()])
def test_no_queue_or_one_that_cannot_redeliver_changes_nothing(queue: Any) -> None:
    redeliver_after(queue, RECORD, 8)


# -- the batch itself ---------------------------------------------------------------------


def sqs_record(message_id: str, body: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "3"},
        "messageAttributes": {
            "correlationId": {"stringValue": f"corr-{message_id}", "dataType": "String"}
        },
        "eventSource": "aws:sqs",
    }


def test_each_record_is_parsed_and_only_the_failed_ones_come_back() -> None:
    seen: list[tuple[str, str, int, Any]] = []

    def handle(record: Any, context: Any) -> None:
        seen.append((record.messageId, record.body.session_id, receive_count(record), context))
        if record.body.session_id == "sess_bad":
            raise StoreUnavailable("throttled")

    batch = JobBatch("summary", lambda record, error: True)
    event = {
        "Records": [
            sqs_record("m-1", json.dumps({"workspaceId": "ws_1", "sessionId": "sess_1"})),
            sqs_record("m-2", json.dumps({"workspaceId": "ws_1", "sessionId": "sess_bad"})),
        ]
    }

    result = batch.process(event, handle, "the context")

    assert result == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}
    assert seen == [("m-1", "sess_1", 3, "the context"), ("m-2", "sess_bad", 3, "the context")]
    assert batch.process({"Records": []}, handle) == {"batchItemFailures": []}


@pytest.mark.parametrize("drop", [True, False])
def test_a_body_that_is_no_job_goes_to_the_workers_choice(drop: bool) -> None:
    told: list[tuple[str, int]] = []

    def on_malformed(record: Any, error: Any) -> bool:
        told.append((record["messageId"], error.error_count()))
        return drop

    batch = JobBatch("erasure", on_malformed)
    event = {"Records": [sqs_record("m-1", "not json"), sqs_record("m-2", '{"kind": "x"}')]}

    result = batch.process(event, lambda record, context: pytest.fail("never handled"))

    assert [m for m, _ in told] == ["m-1", "m-2"]
    expected = [] if drop else [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-2"}]
    assert result == {"batchItemFailures": expected}


def test_a_records_correlation_id_is_read_from_its_attributes() -> None:
    from convo_memory.observability import record_correlation_id

    parsed = SummaryJobRecord.model_validate(
        sqs_record("m-9", json.dumps({"workspaceId": "ws_1", "sessionId": "s"}))
    )

    assert record_correlation_id(parsed) == "corr-m-9"
