"""SQS event source mappings: one background poller per queue -> function.

Like the Lambda service: long-poll the queue, hand the batch to the function as an SQS
event, delete what succeeded. With ``ReportBatchItemFailures`` only the records not
listed in ``batchItemFailures`` are deleted; an exception fails the whole batch. A
failed message reappears after the visibility timeout and the queue's RedrivePolicy
moves it to its DLQ after ``maxReceiveCount`` receives. ``ScalingConfig:
MaximumConcurrency`` is honoured: at most that many batches are in the function at once
(without it, one at a time).
"""

from __future__ import annotations

import base64
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from local_runtime.handlers import FunctionRegistry, region

# Long polling, as Lambda's pollers do: an idle queue costs a request per poller every
# WAIT_TIME_SECONDS (at 1 s, the eight pollers were about 1% of a core while idle). Stopping
# does not wait for a long poll that holds no batch (``join``).
WAIT_TIME_SECONDS = 10
ERROR_BACKOFF_SECONDS = 1.0


@dataclass(frozen=True)
class EventSource:
    """One ``Type: SQS`` event of a function."""

    function: str
    queue_url: str
    queue_arn: str
    batch_size: int = 10
    report_batch_item_failures: bool = False
    maximum_concurrency: int | None = None

    @property
    def concurrency(self) -> int:
        """How many batches may be in the function at once."""
        return max(1, self.maximum_concurrency or 1)


def sqs_record(message: Mapping[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of the SQS event Lambda builds from a received message."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": {
            name: _message_attribute(value)
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3] if queue_arn.count(":") >= 5 else region(),
    }


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues") or []),
        "binaryListValues": [
            base64.b64encode(item).decode("ascii") for item in value.get("BinaryListValues") or []
        ],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    return attribute


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str) -> dict[str, Any]:
    return {"Records": [sqs_record(message, queue_arn) for message in messages]}


def succeeded_records(
    records: Sequence[Mapping[str, Any]], result: Any, report_batch_item_failures: bool
) -> list[Mapping[str, Any]]:
    """The records to delete after the function returned ``result``.

    A malformed batch response fails the whole batch, as it does in Lambda.
    """
    if not report_batch_item_failures or result is None:
        return list(records)
    if not isinstance(result, dict):
        return []
    failures = result.get("batchItemFailures")
    if failures is None:
        return list(records)
    if not isinstance(failures, list):
        return []
    ids = {record["messageId"] for record in records}
    failed: set[str] = set()
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not identifier or identifier not in ids:
            return []
        failed.add(identifier)
    return [record for record in records if record["messageId"] not in failed]


def delete_records(sqs: Any, queue_url: str, records: Sequence[Mapping[str, Any]]) -> None:
    """Delete the records a function finished (at most ten: one receive's batch), as
    Lambda's event source does after the invocation."""
    if records:
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": record["receiptHandle"]}
                for index, record in enumerate(records)
            ],
        )


class QueuePoller(threading.Thread):
    """Polls one queue for one function until ``stop()``, with at most
    ``source.concurrency`` invocations in flight."""

    def __init__(self, source: EventSource, registry: FunctionRegistry, sqs: Any) -> None:
        super().__init__(name=f"poller-{source.function}", daemon=True)
        self.source = source
        self.registry = registry
        self.sqs = sqs
        self._stopping = threading.Event()
        self._long_polling = threading.Event()  # in a receive: no batch held
        self._slots = threading.BoundedSemaphore(source.concurrency)
        self._workers: list[threading.Thread] = []

    def stop(self) -> None:
        self._stopping.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the batch in hand and the batches in flight; once stopped, a long poll
        holding no batch is not waited for (what it receives is left to reappear, as
        when Lambda's poller stops, and the thread ends with the process)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and not (self._stopping.is_set() and self._long_polling.is_set()):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            super().join(0.05 if left is None else min(0.05, left))
        for worker in list(self._workers):
            worker.join(timeout)

    @property
    def busy(self) -> bool:
        """Whether a batch is still in hand or in flight (not just a long poll)."""
        polling = self.is_alive() and not self._long_polling.is_set()
        return polling or any(worker.is_alive() for worker in self._workers)

    def run(self) -> None:
        while not self._stopping.is_set():
            # A free slot first: a batch is never received before it can be invoked.
            if not self._slots.acquire(timeout=WAIT_TIME_SECONDS):
                continue
            self._long_polling.set()
            try:
                messages = self.receive()
            except Exception:
                self._slots.release()
                if self._stopping.is_set():
                    return
                _report(f"polling {self.source.queue_url} for {self.source.function} failed")
                self._stopping.wait(ERROR_BACKOFF_SECONDS)
                continue
            finally:
                self._long_polling.clear()
            if not messages or self._stopping.is_set():
                self._slots.release()  # received after stop: visible again after its timeout
                continue
            if self.source.concurrency == 1:
                self._process_and_release(messages)
                continue
            worker = threading.Thread(
                target=self._process_and_release,
                args=(messages,),
                name=f"{self.name}-batch",
                daemon=True,
            )
            self._workers = [w for w in self._workers if w.is_alive()]
            self._workers.append(worker)
            worker.start()

    def poll_once(self) -> int:
        """Receive one batch and process it; the number of messages received."""
        messages = self.receive()
        if messages:
            self.process(messages)
        return len(messages)

    def receive(self) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.source.queue_url,
            MaxNumberOfMessages=max(1, min(self.source.batch_size, 10)),
            WaitTimeSeconds=WAIT_TIME_SECONDS,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(response.get("Messages") or [])

    def _process_and_release(self, messages: Sequence[Mapping[str, Any]]) -> None:
        try:
            self.process(messages)
        except Exception:
            _report(f"deleting processed messages of {self.source.queue_url} failed")
        finally:
            self._slots.release()

    def process(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Invoke the function with one batch and delete what succeeded."""
        event = sqs_event(messages, self.source.queue_arn)
        try:
            result = self.registry.invoke(self.source.function, event, str(uuid.uuid4()))
        except Exception:
            _report(f"{self.source.function} failed a batch of {len(messages)}")
            return
        done = succeeded_records(event["Records"], result, self.source.report_batch_item_failures)
        delete_records(self.sqs, self.source.queue_url, done)


def _report(what: str) -> None:
    print(f"[local_runtime] {what}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
