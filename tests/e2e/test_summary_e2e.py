"""Rolling summaries through the local runtime: turns over HTTP, the SummaryQueue poller
runs SummarizeFunction, and ``/context`` shows the result: the embedded summarizer keeps
the conversation's facts, and a capability on a model connection is summarized by its own
model.

An outage is simulated with the embedded summarizer's switch CONVO_SUMMARIZER_FAIL_WHILE:
it fails while the file named exists, so a test can end the outage mid-run (by deleting
the file) and watch the summary catch up. All run on the tier's shared runtime: the first
two in the dev workspace, the others (``stack``) in a workspace of their own, the switch
being the shared runtime's (``shared_summarizer_outage``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.runtime_process import (
    DEV_TOKEN,
    RuntimeProcess,
    lent_model_id,
    shared_runtime_on,
    shared_summarizer_outage,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

SMALL_REPLAY = {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1}
WAIT_SECONDS = 20.0


@dataclass
class SummaryStack:
    """The shared runtime, whose embedded summarizer fails while ``outage`` exists (each
    test sets it as it needs), with a workspace of the module's own (``token``) and a
    fake model on its connection ``fake`` under ``model_id``."""

    runtime: RuntimeProcess
    outage: Path
    model: FakeOpenAIServer
    token: str
    model_id: str


@pytest.fixture(scope="module")
def stack() -> Iterator[SummaryStack]:
    model = FakeOpenAIServer(reply="Ada asked about order 48213.")
    with shared_runtime_on(model) as (runtime, token, _):
        outage = shared_summarizer_outage()
        try:
            yield SummaryStack(runtime, outage, model, token, lent_model_id(model))
        finally:
            outage.unlink(missing_ok=True)  # the shared runtime's summarizer up again


def short_memory_session(runtime: RuntimeProcess, token: str = DEV_TOKEN) -> str:
    status, _, capability = runtime.call(
        "POST",
        "/v1/capabilities",
        token=token,
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
        token=token,
        json={"capabilityId": capability["id"], "externalRef": "customer-4471"},
    )
    assert status == 201, session
    return str(session["id"])


def send_turns(
    runtime: RuntimeProcess, session_id: str, n: int, token: str = DEV_TOKEN
) -> list[dict[str, Any]]:
    bodies = []
    for i in range(1, n + 1):
        status, _, body = runtime.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=token,
            json={"input": f"turn {i}: my locker code is {4000 + i}"},
        )
        assert status == 200, body
        assert body["recorded"] is True
        bodies.append(body)
    return bodies


def context(runtime: RuntimeProcess, session_id: str, token: str = DEV_TOKEN) -> dict[str, Any]:
    status, _, body = runtime.call("GET", f"/v1/sessions/{session_id}/context", token=token)
    assert status == 200, body
    return dict(body)


def caught_up(
    runtime: RuntimeProcess, session_id: str, token: str = DEV_TOKEN
) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        view = context(runtime, session_id, token)
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
    session_id = short_memory_session(runtime, stack.token)

    turns = send_turns(runtime, session_id, 6, stack.token)

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
    view = context(runtime, session_id, stack.token)
    assert view["summary"] is None and view["omittedMessages"] == 8
    (turn,) = send_turns(runtime, session_id, 1, stack.token)
    assert turn["context"]["replayedMessages"] == 4


def test_after_an_outage_ends_the_summary_catches_up(stack: SummaryStack) -> None:
    outage, runtime = stack.outage, stack.runtime
    outage.write_text("down")
    session_id = short_memory_session(runtime, stack.token)

    turns = send_turns(runtime, session_id, 6, stack.token)  # 12 messages: 1..8 omitted
    wait_for(
        lambda: any(
            "summary job failed" in line and session_id in line for line in runtime.stdout_lines
        ),
        WAIT_SECONDS,
        "the summary job to fail",
    )
    assert all(t["recorded"] for t in turns)
    assert context(runtime, session_id, stack.token)["summary"] is None

    outage.unlink()  # the summarizer recovers; the failed job is retried by the queue

    view = wait_for(
        caught_up(runtime, session_id, stack.token),
        WAIT_SECONDS,
        "the summary to catch up after the outage",
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
        token=stack.token,
        json={
            "name": "own model",
            "kind": "generative",
            "provider": {"connection": "fake", "modelId": stack.model_id},
            "replay": SMALL_REPLAY,
        },
    )
    assert status == 201, capability
    assert capability["summary"] is None  # no summary.provider: its own model
    status, _, session = runtime.call(
        "POST",
        "/v1/sessions",
        token=stack.token,
        json={"capabilityId": capability["id"], "externalRef": "customer-4471"},
    )
    assert status == 201, session

    send_turns(runtime, str(session["id"]), 4, stack.token)

    view = wait_for(
        caught_up(runtime, str(session["id"]), stack.token),
        WAIT_SECONDS,
        "a summary from the model",
    )
    assert view["summary"]["text"] == "Ada asked about order 48213."
    summary_requests = [
        r for r in model.requests if "rolling summary" in r.body["messages"][0]["content"]
    ]
    assert summary_requests
    assert {r.body["model"] for r in summary_requests} == {stack.model_id}
    assert "turn 1: my locker code is 4001" in summary_requests[0].body["messages"][-1]["content"]
