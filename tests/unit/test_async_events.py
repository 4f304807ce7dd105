"""Lambda's asynchronous invocations as the local runtime emulates them: a failed run is
retried after a delay, then sent to the on-failure destination as Lambda's record (or
dropped and counted when that fails too)."""

from __future__ import annotations

import json
from typing import Any

from local_runtime.async_events import AsyncConfig, AsyncEvents, async_invoke_configs
from local_runtime.aws_resources import DEFAULT_TEMPLATE, load_template
from tests.fakes.adapters import FakeClock


class Registry:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[str, Any]] = []

    def invoke(self, name: str, event: Any, request_id: str | None = None) -> Any:
        self.calls.append((name, event))
        if len(self.calls) <= self.failures:
            raise RuntimeError("the store is down")
        return {"outcome": "recorded"}


class Sqs:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> None:
        if self.fail:
            raise RuntimeError("SQS is down too")
        self.sent.append(kwargs)


def _events(registry: Registry, sqs: Sqs, clock: FakeClock) -> AsyncEvents:
    configs = {"RepairFunction": AsyncConfig(2, "http://sqs/RepairQueue")}
    return AsyncEvents(registry, configs, lambda: sqs, clock=clock)  # type: ignore[arg-type]


def test_a_failed_run_is_retried_after_one_then_two_minutes() -> None:
    clock, registry, sqs = FakeClock(), Registry(failures=2), Sqs()
    events = _events(registry, sqs, clock)
    events.submit("RepairFunction", {"turn": 1})

    assert events.run_due() == 1 and events.pending() == 1
    clock.advance(59)
    assert events.run_due() == 0
    clock.advance(1)
    assert events.run_due() == 1
    clock.advance(120)
    assert events.run_due() == 1

    assert len(registry.calls) == 3 and events.succeeded == 1
    assert sqs.sent == [] and events.pending() == 0


def test_an_event_that_fails_every_attempt_goes_to_the_destination() -> None:
    clock, registry, sqs = FakeClock(), Registry(failures=99), Sqs()
    events = _events(registry, sqs, clock)
    events.submit("RepairFunction", {"turn": 1})
    for _ in range(3):
        events.run_due()
        clock.advance(120)

    assert len(registry.calls) == 3
    (message,) = sqs.sent
    assert message["QueueUrl"] == "http://sqs/RepairQueue"
    record = json.loads(message["MessageBody"])
    assert record["requestPayload"] == {"turn": 1}
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert events.dropped == []


def test_an_event_whose_destination_fails_is_dropped_and_counted() -> None:
    clock, registry, sqs = FakeClock(), Registry(failures=99), Sqs(fail=True)
    events = _events(registry, sqs, clock)
    events.submit("RepairFunction", {"turn": 1})
    for _ in range(3):
        events.run_due()
        clock.advance(120)

    assert events.dropped == [{"turn": 1}]


def test_the_templates_repair_function_retries_twice_into_the_repair_queue() -> None:
    configs = async_invoke_configs(load_template(DEFAULT_TEMPLATE), {"RepairQueue": "url"})

    assert configs == {"RepairFunction": AsyncConfig(2, "url")}
