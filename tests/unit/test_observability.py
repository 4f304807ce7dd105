"""Observability: measured model calls, the correlation id's trip into SQS jobs, and the
layer's logs written through the one Powertools handler."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory import observability
from convo_memory.adapters.metering import MeteredModel, MeteredToolModel, metered
from convo_memory.adapters.queues import SqsQueue
from convo_memory.domain.errors import ProviderError
from convo_memory.domain.generation import Completion, ModelStep, TokenUsage
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.ports import ToolCallingModel
from tests.fakes.adapters import FakeMetrics
from tests.support.turns import served

PROMPT = Prompt(system="s", messages=(ChatMessage("user", "hi"),), user_input="hi")


class Ticking:
    """A clock that moves 0.25 s each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


class Model:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def complete(self, prompt: Prompt) -> Completion:
        if self.fail:
            raise ProviderError("down")
        return Completion("answer", usage=TokenUsage(12, 3))

    def stream(self, prompt: Prompt) -> Iterator[str]:
        yield "a"
        yield "b"


class ToolModel(Model):
    def step(self, prompt: Prompt, rounds: Any, tools: Any, **kwargs: Any) -> ModelStep:
        return ModelStep("done", usage=TokenUsage(40, 5))


def test_a_metered_call_reports_its_latency_outcome_and_tokens() -> None:
    metrics = FakeMetrics()
    model = MeteredModel(Model(), metrics, "bedrock", clock=Ticking())

    assert model.complete(PROMPT).text == "answer"

    assert metrics.timings["ModelLatency"] == [250.0]
    assert ("ModelCalls", 1, {"connection": "bedrock"}) in metrics.events
    assert "ModelErrors" not in metrics.counts
    assert ("ModelInputTokens", 12, {"connection": "bedrock"}) in metrics.events
    assert ("ModelOutputTokens", 3, {"connection": "bedrock"}) in metrics.events


def test_a_failed_call_is_counted_as_an_error_and_still_raises() -> None:
    metrics = FakeMetrics()
    model = MeteredModel(Model(fail=True), metrics, "ollama", clock=Ticking())

    with pytest.raises(ProviderError):
        model.complete(PROMPT)

    assert ("ModelCalls", 1, {"connection": "ollama"}) in metrics.events
    assert ("ModelErrors", 1, {"connection": "ollama"}) in metrics.events
    assert "ModelInputTokens" not in metrics.counts


def test_a_stream_is_measured_to_its_last_delta() -> None:
    metrics = FakeMetrics()

    assert "".join(MeteredModel(Model(), metrics, "x", clock=Ticking()).stream(PROMPT)) == "ab"

    assert metrics.timings["ModelLatency"] == [250.0]


def test_a_tool_calling_model_stays_one_and_its_steps_are_measured() -> None:
    metrics = FakeMetrics()
    wrapped = metered(ToolModel(), metrics, "embedded")

    assert isinstance(wrapped, MeteredToolModel) and isinstance(wrapped, ToolCallingModel)
    assert not isinstance(metered(Model(), metrics, "x"), ToolCallingModel)
    assert wrapped.step(PROMPT, (), (), timeout=5).text == "done"
    assert metrics.counts["ModelInputTokens"] == 40


class CachingModel(ToolModel):
    def step(self, prompt: Prompt, rounds: Any, tools: Any, **kwargs: Any) -> ModelStep:
        return ModelStep("done", usage=TokenUsage(2000, 5, 1800, 150))


def test_cache_reads_and_writes_are_metrics_and_add_up_on_the_turns_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics = FakeMetrics()
    model = metered(CachingModel(), metrics, "bedrock")
    assert isinstance(model, MeteredToolModel)
    stream = io.StringIO()
    monkeypatch.setattr(observability.logger.registered_handler, "stream", stream)

    with observability.turn_count(metrics, "messages") as count:
        model.step(PROMPT, (), (), timeout=5)  # an agent turn: two model calls
        model.step(PROMPT, (), (), timeout=5)
        count.served(served("ses_1"))
    model.step(PROMPT, (), (), timeout=5)  # a call outside any turn (a summary job)

    assert ("ModelCachedInputTokens", 1800, {"connection": "bedrock"}) in metrics.events
    assert ("ModelCacheWriteInputTokens", 150, {"connection": "bedrock"}) in metrics.events
    assert metrics.counts["ModelInputTokens"] == 3 * 2000
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["cachedTokens"] == 3600 and "inTokens" not in line


def test_a_provider_that_reports_no_cache_adds_no_cache_metric() -> None:
    metrics = FakeMetrics()

    MeteredModel(Model(), metrics, "ollama", clock=Ticking()).complete(PROMPT)

    assert metrics.counts["ModelInputTokens"] == 12
    assert "ModelCachedInputTokens" not in metrics.counts
    assert "ModelCacheWriteInputTokens" not in metrics.counts


class RecordingSqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> None:
        self.sent.append(kwargs)


def test_a_queued_job_carries_the_correlation_id_of_the_request_that_sent_it() -> None:
    sqs = RecordingSqs()
    queue = SqsQueue(sqs, "https://sqs/q")
    observability.set_correlation_id("req-123")
    try:
        queue.send({"sessionId": "s"})
    finally:
        observability.clear_correlation_id()
    queue.send({"sessionId": "t"})

    assert sqs.sent[0]["MessageAttributes"] == {
        "correlationId": {"DataType": "String", "StringValue": "req-123"}
    }
    assert sqs.sent[1]["MessageAttributes"] == {}


def test_correlation_ids_are_kept_per_thread() -> None:
    seen: dict[str, str | None] = {}
    barrier = threading.Barrier(2)

    def request(name: str) -> None:
        observability.set_correlation_id(f"id-{name}")
        barrier.wait(5)
        seen[name] = observability.correlation_id()
        observability.clear_correlation_id()

    threads = [threading.Thread(target=request, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)

    assert seen == {"a": "id-a", "b": "id-b"}


def test_a_record_attribute_gives_the_job_its_correlation_id() -> None:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    record = SQSRecord(
        {
            "messageId": "m",
            "body": "{}",
            "messageAttributes": {"correlationId": {"stringValue": "req-9", "dataType": "String"}},
        }
    )

    assert observability.record_correlation_id(record) == "req-9"
    assert observability.record_correlation_id(SQSRecord({"messageId": "m"})) is None


def test_the_layers_logs_are_json_with_the_correlation_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    handler = observability.logger.registered_handler
    monkeypatch.setattr(handler, "stream", stream)
    observability.set_correlation_id("req-77")
    try:
        logging.getLogger("convo_memory.services.recording").warning("a layer warning")
    finally:
        observability.clear_correlation_id()

    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert line["message"] == "a layer warning"
    assert line["correlation_id"] == "req-77"
    assert line["service"] == observability.SERVICE_NAME
