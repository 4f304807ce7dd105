"""RepairFunction's SQS event source for the in-process stack, by hand: what the
RepairQueue holds, received, deleted and shaped as the records Lambda would pass."""

from __future__ import annotations

from typing import Any

from tests.support.inprocess_api import InProcessApi


def drain_repairs(api: InProcessApi) -> list[dict[str, Any]]:
    """Up to ten repair messages as SQS event records; they are gone from the queue."""
    sqs = api.container.infrastructure.clients["sqs"]
    url = api.container.settings.repair_queue_url
    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    records = [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:RepairQueue",
            "awsRegion": "us-east-1",
        }
        for m in out.get("Messages", [])
    ]
    for m in out.get("Messages", []):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return records
