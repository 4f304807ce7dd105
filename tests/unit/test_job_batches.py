"""job_batches.redeliver_after: a failing record comes back soon when its queue can say
so, and a queue that cannot (or an SQS error) leaves the visibility timeout in force."""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel

from convo_memory.domain.errors import StoreUnavailable
from convo_memory.job_batches import redeliver_after

RECORD = SqsRecordModel.model_validate(
    {
        "messageId": "m-1",
        "receiptHandle": "rh-1",
        "body": "{}",
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
