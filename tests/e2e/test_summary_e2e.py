"""Rolling summaries through the local runtime: turns over HTTP, the SummaryQueue poller
runs SummarizeFunction, and ``/context`` shows the result: the embedded summarizer keeps
the conversation's facts, and a capability on a model connection is summarized by its own
model.

An outage is simulated with the embedded summarizer's switch CONVO_SUMMARIZER_FAIL_WHILE:
it fails while the file named exists, so a test can end the outage mid-run (by deleting
the file) and watch the summary catch up. Those tests and the model connection's share
one runtime (``stack``); the first uses the shared ``local_runtime``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess, launch_runtime
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

SMALL_REPLAY = {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1}
WAIT_SECONDS = 20.0


@dataclass
class SummaryStack:
    """A runtime whose embedded summarizer fails while ``outage`` exists (each test sets
    it as it needs), with a provider connection ``fake`` (models ``m-*``) on ``model``."""

    runtime: RuntimeProcess
    outage: Path
    model: FakeOpenAIServer


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SummaryStack]:
    outage = tmp_path_factory.mktemp("summarizer") / "down"
    with FakeOpenAIServer(reply="Ada asked about order 48213.") as model:
        connections = {"fake": {"type": "openai", "baseUrl": model.base_url, "models": ["m-*"]}}
        runtime = launch_runtime(
            {
                "CONVO_SUMMARIZER_FAIL_WHILE": str(outage),
                "CONVO_PROVIDER_CONNECTIONS": json.dumps(connections),
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        try:
            yield SummaryStack(runtime, outage, model)
        finally:
            runtime.assert_stopped_cleanly()


def short_memory_session(runtime: RuntimeProcess) -> str:
    status, _, capability = runtime.call(
        "POST",
        "/v1/capabilities",
        token=DEV_TOKEN,
        json={
            "name": "short memory",
            "kind": "generative",
            "replay": SMALL_REPLAY,
            "summary": {"maxChars": 20_000},
        },
    )
    assert status == 201, capability
    status, _, session = runtime.call(
        "POST",
        "/v1/sessions",
        token=DEV_TOKEN,
        json={"capabilityId": capability["id"], "externalRef": "customer-4471"},
    )
    assert status == 201, session
    return str(session["id"])


def send_turns(runtime: RuntimeProcess, session_id: str, n: int) -> list[dict[str, Any]]:
    bodies = []
    for i in range(1, n + 1):
        status, _, body = runtime.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=DEV_TOKEN,
            json={"input": f"turn {i}: my locker code is {4000 + i}"},
        )
        assert status == 200, body
        assert body["recorded"] is True
        bodies.append(body)
    return bodies


def context(runtime: RuntimeProcess, session_id: str) -> dict[str, Any]:
    status, _, body = runtime.call("GET", f"/v1/sessions/{session_id}/context", token=DEV_TOKEN)
    assert status == 200, body
    return dict(body)


def caught_up(runtime: RuntimeProcess, session_id: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        view = context(runtime, session_id)
        summary = view["summary"]
        return view if summary and summary["throughSeq"] >= view["omittedMessages"] else None

    return check


def test_after_a_burst_of_turns_the_summary_catches_up_within_seconds(
    local_runtime: RuntimeProcess,
) -> None:
    session_id = short_memory_session(local_runtime)

    send_turns(local_runtime, session_id, 7)  # 14 messages: 1..10 omitted

    view = wait_for(
        caught_up(local_runtime, session_id), WAIT_SECONDS, "summary.throughSeq >= omitted"
    )
    assert view["omittedMessages"] == 10
    text = view["summary"]["text"]
    assert "turn 1: my locker code is 4001" in text  # the oldest message is folded
    assert "turn 5: my locker code is 4005" in text  # and the newest omitted one


FILLER = [
    "Thanks, that is really helpful.",
    "Nice weather today, isn't it?",
    "Haha, fair enough.",
    "I love that idea, tell me more",
    "That sounds great to me!",
    "ok",
]


def test_after_sixty_turns_of_small_talk_the_first_turns_facts_are_still_in_the_summary(
    local_runtime: RuntimeProcess,
) -> None:
    status, _, session = local_runtime.call(
        "POST",
        "/v1/sessions",
        token=DEV_TOKEN,
        # The seeded capability: the embedded model, replay and summary at their defaults.
        json={"capabilityId": "cap-generative", "externalRef": "customer-4471"},
    )
    assert status == 201, session
    session_id = str(session["id"])
    first = "Hi, my name is Ada Lovelace. My order number is 48213, placed on March 3, 2025."
    inputs = [first, *(f"{FILLER[i % len(FILLER)]} ({i})" for i in range(60))]

    for text in inputs:
        status, _, body = local_runtime.call(
            "POST", f"/v1/sessions/{session_id}/messages", token=DEV_TOKEN, json={"input": text}
        )
        assert status == 200 and body["recorded"] is True, body

    view = wait_for(
        caught_up(local_runtime, session_id), WAIT_SECONDS, "summary.throughSeq >= omitted"
    )
    assert view["omittedMessages"] == 122 - 20
    text = view["summary"]["text"]
    for fact in ("Ada Lovelace", "48213", "March 3, 2025"):
        assert fact in text
    assert len(text) <= 2000
    assert text.count("48213") == 1  # the model's echo of it is no new fact


def test_with_the_summarizer_down_every_turn_still_succeeds_without_a_summary(
    stack: SummaryStack,
) -> None:
    stack.outage.write_text("down")
    runtime = stack.runtime
    session_id = short_memory_session(runtime)

    turns = send_turns(runtime, session_id, 6)

    assert [t["context"]["replayedMessages"] for t in turns] == [0, 2, 4, 4, 4, 4]
    assert [t["context"]["omittedMessages"] for t in turns] == [0, 0, 0, 2, 4, 6]
    assert not any(t["context"]["summaryIncluded"] for t in turns)
    # The job ran and failed (it stays on the queue for a retry) ...
    wait_for(
        lambda: any(
            "summary job failed" in line and session_id in line for line in runtime.stdout_lines
        ),
        WAIT_SECONDS,
        "the summary job to fail",
    )
    # ... and the conversation is unaffected.
    view = context(runtime, session_id)
    assert view["summary"] is None and view["omittedMessages"] == 8
    (turn,) = send_turns(runtime, session_id, 1)
    assert turn["context"]["replayedMessages"] == 4


def test_after_an_outage_ends_the_summary_catches_up(stack: SummaryStack) -> None:
    outage, runtime = stack.outage, stack.runtime
    outage.write_text("down")
    session_id = short_memory_session(runtime)

    turns = send_turns(runtime, session_id, 6)  # 12 messages: 1..8 omitted
    wait_for(
        lambda: any(
            "summary job failed" in line and session_id in line for line in runtime.stdout_lines
        ),
        WAIT_SECONDS,
        "the summary job to fail",
    )
    assert all(t["recorded"] for t in turns)
    assert context(runtime, session_id)["summary"] is None

    outage.unlink()  # the summarizer recovers; the failed job is retried by the queue

    view = wait_for(
        caught_up(runtime, session_id), WAIT_SECONDS, "the summary to catch up after the outage"
    )
    assert view["omittedMessages"] == 8
    assert "turn 1: my locker code is 4001" in view["summary"]["text"]
    assert "turn 4: my locker code is 4004" in view["summary"]["text"]


def test_a_capability_on_a_model_connection_is_summarized_by_its_own_model(
    stack: SummaryStack,
) -> None:
    stack.outage.unlink(missing_ok=True)  # (the switch is the embedded summarizer's)
    runtime, model = stack.runtime, stack.model
    status, _, capability = runtime.call(
        "POST",
        "/v1/capabilities",
        token=DEV_TOKEN,
        json={
            "name": "own model",
            "kind": "generative",
            "provider": {"connection": "fake", "modelId": "m-chat"},
            "replay": SMALL_REPLAY,
        },
    )
    assert status == 201, capability
    assert capability["summary"] is None  # no summary.provider: its own model
    status, _, session = runtime.call(
        "POST",
        "/v1/sessions",
        token=DEV_TOKEN,
        json={"capabilityId": capability["id"], "externalRef": "customer-4471"},
    )
    assert status == 201, session

    send_turns(runtime, str(session["id"]), 4)

    view = wait_for(
        caught_up(runtime, str(session["id"])), WAIT_SECONDS, "a summary from the model"
    )
    assert view["summary"]["text"] == "Ada asked about order 48213."
    summary_requests = [
        r for r in model.requests if "rolling summary" in r.body["messages"][0]["content"]
    ]
    assert summary_requests
    assert {r.body["model"] for r in summary_requests} == {"m-chat"}
    assert "turn 1: my locker code is 4001" in summary_requests[0].body["messages"][-1]["content"]
