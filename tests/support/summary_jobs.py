"""SummarizeFunction's SQS event source mapping for the in-process stack: receive from the
moto SummaryQueue, invoke the function with the batch (as Lambda would), delete what
succeeded. ``run_pending`` drains the queue in the caller's thread (a conversation at a
human pace, deterministic); ``start`` polls in the background (short polls: a long poll
would hold the in-process moto lock)."""

from __future__ import annotations

import threading
from typing import Any

import boto3

from local_runtime.queue_pollers import delete_records, sqs_event, succeeded_records
from tests.support.inprocess_api import REGION, InProcessApi, serialized


class SummaryJobs:
    def __init__(self, api: InProcessApi, poll_seconds: float = 0.05) -> None:
        self.api = api
        self.sqs: Any = serialized(boto3.client("sqs", region_name=REGION))
        self.url = api.resources.queue_urls["SummaryQueue"]
        self.arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.poll_seconds = poll_seconds
        self.invocations = 0
        self.records_ok = 0
        self.records_failed = 0
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run_once(self) -> int:
        """One receive and, if it got messages, one invocation; the messages received."""
        messages = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return 0
        event = sqs_event(messages, self.arn)
        try:
            result = self.api.invoke("SummarizeFunction", event)
        except Exception as exc:  # the whole batch failed: SQS redelivers it later
            done: list[Any] = []
            self.errors.append(f"{type(exc).__name__}: {exc}")
        else:
            done = list(succeeded_records(event["Records"], result, True))
        delete_records(self.sqs, self.url, done)
        with self._lock:
            self.invocations += 1
            self.records_ok += len(done)
            self.records_failed += len(messages) - len(done)
        return len(messages)

    def run_pending(self) -> int:
        """Invoke the function until no message is visible; the invocations it took."""
        before = self.invocations
        while self.run_once():
            pass
        return self.invocations - before

    # -- in the background -------------------------------------------------------------
    def start(self) -> SummaryJobs:
        self._thread = threading.Thread(target=self._poll, name="summary-jobs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(30)

    def _poll(self) -> None:
        while not self._stopping.is_set():
            if not self.run_once():
                self._stopping.wait(self.poll_seconds)

    def __enter__(self) -> SummaryJobs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
