"""EraseEndUserFunction's SQS event source for the in-process stack, by hand: what the
ErasureQueue holds, received, handed to the worker one record per invocation (its
BatchSize) and deleted when the worker did not report it failed. Delayed messages (the
sweeps, up to 900 s) can be made visible at once: the test's way of letting time pass.
The same for ForkCopyFunction and the ForkCopyQueue (``queue="fork_copy"``)."""

from __future__ import annotations

import json
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from tests.support.fake_aws import REGION
from tests.support.inprocess_api import InProcessApi

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:ErasureQueue"
# Each queue's URL setting and the function its event source invokes.
QUEUES = {
    "erasure": ("erasure_queue_url", "EraseEndUserFunction"),
    "fork_copy": ("fork_copy_queue_url", "ForkCopyFunction"),
}


def release_delayed(api: InProcessApi) -> int:
    """Make every delayed message of the ErasureQueue visible now: how many were delayed."""
    name = api.container.settings.erasure_queue_url.rsplit("/", 1)[1]
    queue = sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues[name]
    delayed = [message for message in queue._messages if message.delayed]
    for message in delayed:
        message.delayed_until = 0
    return len(delayed)


def sqs_record(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": {},
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": QUEUE_ARN,
        "awsRegion": REGION,
    }


def job_record(body: dict[str, Any], deliveries: int = 1) -> dict[str, Any]:
    """A record for ``body`` as Lambda would pass it on its ``deliveries``-th delivery."""
    return {
        "messageId": f"m-{deliveries}",
        "receiptHandle": "rh",
        "body": json.dumps(body),
        "attributes": {
            "ApproximateReceiveCount": str(deliveries),
            "SentTimestamp": "1700000000000",
            "SenderId": "sender",
            "ApproximateFirstReceiveTimestamp": "1700000000000",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": QUEUE_ARN,
        "awsRegion": REGION,
    }


def _url(api: InProcessApi, queue: str) -> str:
    return str(getattr(api.container.settings, QUEUES[queue][0]))


def receive_jobs(api: InProcessApi, queue: str = "erasure") -> list[dict[str, Any]]:
    """Every visible message of the ErasureQueue (or ``queue``) as a record (they stay
    in the queue, invisible, until ``ack``)."""
    sqs = api.container.infrastructure.clients["sqs"]
    url = _url(api, queue)
    records: list[dict[str, Any]] = []
    while True:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
        messages = out.get("Messages", [])
        if not messages:
            return records
        records += [sqs_record(message) for message in messages]


def ack(api: InProcessApi, record: dict[str, Any], queue: str = "erasure") -> None:
    sqs = api.container.infrastructure.clients["sqs"]
    sqs.delete_message(QueueUrl=_url(api, queue), ReceiptHandle=record["receiptHandle"])


def invoke_worker(api: InProcessApi, record: dict[str, Any], queue: str = "erasure") -> bool:
    """One invocation of the queue's worker with ``record``: whether it succeeded."""
    result = api.invoke(QUEUES[queue][1], {"Records": [record]})
    return not (result or {}).get("batchItemFailures")


def run_erasure_jobs(api: InProcessApi, *, sweeps: bool = False) -> list[dict[str, Any]]:
    """Run the worker on the queue's jobs until none is left (with ``sweeps``, the
    delayed sweeps too, as if their time had come): the bodies it ran."""
    ran: list[dict[str, Any]] = []
    while True:
        if sweeps:
            release_delayed(api)
        records = receive_jobs(api)
        if not records:
            return ran
        for record in records:
            assert invoke_worker(api, record), record["body"]
            ack(api, record)
            ran.append(json.loads(record["body"]))


def run_fork_copy_jobs(api: InProcessApi) -> list[dict[str, Any]]:
    """Run ForkCopyFunction on the ForkCopyQueue's jobs until none is left: their bodies."""
    ran: list[dict[str, Any]] = []
    while records := receive_jobs(api, "fork_copy"):
        for record in records:
            assert invoke_worker(api, record, "fork_copy"), record["body"]
            ack(api, record, "fork_copy")
            ran.append(json.loads(record["body"]))
    return ran
