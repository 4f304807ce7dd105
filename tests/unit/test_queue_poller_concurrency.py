"""The local runtime's SQS event source mappings honour ``ScalingConfig:
MaximumConcurrency``, and ``make run`` takes the summary settings as CONVO_SUMMARY_*."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from local_runtime.queue_pollers import EventSource, QueuePoller
from local_runtime.runtime import RuntimeConfig

ARN = "arn:aws:sqs:us-east-1:123456789012:convo-local-SummaryQueue"
URL = "http://127.0.0.1:1/123456789012/convo-local-SummaryQueue"


class FakeSqs:
    """Hands out ``messages`` one per receive; records deletions."""

    def __init__(self, messages: int) -> None:
        self.lock = threading.Lock()
        self.pending = [
            {"MessageId": f"m-{i}", "ReceiptHandle": f"rh-{i}", "Body": "{}"}
            for i in range(messages)
        ]
        self.deleted: list[str] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        with self.lock:
            if not self.pending:
                time.sleep(0.01)  # an empty long poll
                return {}
            return {"Messages": [self.pending.pop(0)]}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> None:
        with self.lock:
            self.deleted.extend(entry["ReceiptHandle"] for entry in Entries)


class SlowFunction:
    """A function registry whose one function takes a while and counts overlaps."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0

    def invoke(self, name: str, event: Mapping[str, Any], request_id: str) -> Any:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return {"batchItemFailures": []}


def drain(concurrency: int | None, messages: int = 8) -> tuple[SlowFunction, FakeSqs]:
    sqs = FakeSqs(messages)
    function = SlowFunction(0.15)
    source = EventSource("SummarizeFunction", URL, ARN, 10, True, concurrency)
    poller = QueuePoller(source, function, sqs)  # type: ignore[arg-type]
    poller.start()
    deadline = time.monotonic() + 20
    while len(sqs.deleted) < messages and time.monotonic() < deadline:
        time.sleep(0.02)
    poller.stop()
    poller.join(5)
    return function, sqs


@pytest.mark.parametrize("concurrency", [2, 3])
def test_at_most_maximum_concurrency_batches_are_in_the_function_at_once(
    concurrency: int,
) -> None:
    function, sqs = drain(concurrency)

    assert sorted(sqs.deleted) == sorted(f"rh-{i}" for i in range(8))
    assert function.calls == 8
    # Eight slow batches: the limit is reached, and never exceeded.
    assert function.most == concurrency


def test_without_maximum_concurrency_one_batch_runs_at_a_time() -> None:
    function, sqs = drain(None, messages=3)

    assert len(sqs.deleted) == 3
    assert function.most == 1


def test_make_run_passes_the_summary_settings_to_the_functions() -> None:
    config = RuntimeConfig.from_env(
        {
            "CONVO_SUMMARY_CONNECTION": "ollama",
            "CONVO_SUMMARY_MODEL_ID": "llama3.2:1b",
            "CONVO_SUMMARY_BATCH_TURNS": "8",
            "CONVO_SUMMARY_UNKNOWN": "ignored",
        }
    )

    assert dict(config.summary_settings) == {
        "SUMMARY_CONNECTION": "ollama",
        "SUMMARY_MODEL_ID": "llama3.2:1b",
        "SUMMARY_BATCH_TURNS": "8",
    }
    assert RuntimeConfig.from_env({}).summary_settings == ()


class LongPollingSqs(FakeSqs):
    """A receive that waits until ``release`` is set (a long poll), then hands out one
    message."""

    def __init__(self) -> None:
        super().__init__(1)
        self.in_poll = threading.Event()
        self.release = threading.Event()

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.in_poll.set()
        self.release.wait(10)
        return super().receive_message()


def test_stopping_does_not_wait_for_a_long_poll_and_leaves_what_it_brings() -> None:
    sqs = LongPollingSqs()
    function = SlowFunction(0.0)
    poller = QueuePoller(EventSource("SummarizeFunction", URL, ARN), function, sqs)  # type: ignore[arg-type]
    poller.start()
    assert sqs.in_poll.wait(5)

    poller.stop()
    started = time.monotonic()
    poller.join(5)
    waited = time.monotonic() - started
    busy = poller.busy
    sqs.release.set()  # the long poll ends with a message, after the stop
    threading.Thread.join(poller, 5)  # the thread itself, long poll or not

    assert waited < 1 and not busy
    assert not poller.is_alive()
    assert function.calls == 0 and sqs.deleted == []  # left to reappear


def test_stopping_waits_for_the_batch_in_hand() -> None:
    sqs = FakeSqs(1)
    function = SlowFunction(0.5)
    poller = QueuePoller(EventSource("SummarizeFunction", URL, ARN), function, sqs)  # type: ignore[arg-type]
    poller.start()
    while function.calls == 0:
        time.sleep(0.01)

    poller.stop()
    poller.join(5)

    assert not poller.busy and sqs.deleted == ["rh-0"]
