"""One time budget per turn (issue 12): a model that outlives the turn's deadline is
stopped, the turn keeps what it has and is recorded like any other, and the
``TurnDeadlineReached`` metric counts it; a streamed turn's idempotency lock lasts as long
as the turn may run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from convo_memory.doors.stream import StreamDoor
from convo_memory.services.answering import CUT_OFF_MARK, NO_ANSWER_IN_TIME
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant, open_session, transcript


@dataclass
class Slow:
    api: InProcessApi
    fake: FakeOpenAIServer
    tenant: Tenant
    capability: str


@pytest.fixture
def slow(backend: AwsBackend) -> Iterator[Slow]:
    """A stack whose turns get two seconds, over a model on a local fake server."""
    with FakeOpenAIServer() as fake:
        connections = {"local": {"type": "openai", "baseUrl": fake.base_url, "models": ["m"]}}
        env = {
            "PROVIDER_CONNECTIONS": json.dumps(connections),
            "TURN_DEADLINE_SECONDS": "2",
            "STREAM_TURN_DEADLINE_SECONDS": "2",
        }
        with serving(backend, env) as api:
            tenant = Tenant(*new_workspace(api, "slow"))
            created = api.call(
                "POST",
                "/v1/capabilities",
                token=tenant.token,
                json_body={
                    "name": "slow",
                    "kind": "generative",
                    "provider": {"connection": "local", "modelId": "m"},
                },
            )
            assert created.status == 201, created.body
            yield Slow(api, fake, tenant, created.body["id"])
            if fake.gate is not None:
                fake.gate.set()  # let the stalled stream end


def test_a_model_silent_past_the_deadline_leaves_a_recorded_turn_saying_so(
    slow: Slow, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(slow.api, slow.tenant, capability=slow.capability)
    slow.fake.delay = 4.0  # answers after the turn's two seconds

    response = slow.api.call(
        "POST",
        f"/v1/capabilities/{slow.capability}/predict",
        token=slow.tenant.token,
        json_body={"input": "are you there?", "sessionId": session_id},
    )

    assert response.status == 200
    assert len(slow.fake.requests) == 1  # the model was asked, and outlived the budget
    assert response.body["output"] == NO_ANSWER_IN_TIME
    assert response.body["recorded"] is True
    messages = transcript(slow.api, slow.tenant, session_id)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "are you there?"),
        ("assistant", NO_ANSWER_IN_TIME),
    ]
    output = capsys.readouterr().out
    assert '"TurnDeadlineReached"' in output and '"outcome":"none"' in output


def test_a_stream_cut_by_the_deadline_keeps_and_records_what_was_written(
    slow: Slow, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(slow.api, slow.tenant, capability=slow.capability)
    slow.fake.stream_chunks = ["The order ", "shipped ", "on Monday."]
    slow.fake.gate = threading.Event()  # the model stalls after its first chunk
    slow.fake.gate_timeout = 10.0
    door = StreamDoor(lambda: slow.api.container)

    response = door.handle(
        "POST",
        f"/v1/capabilities/{slow.capability}/predict/stream",
        {"authorization": f"Bearer {slow.tenant.token}"},
        json.dumps({"input": "where is it?", "sessionId": session_id}).encode(),
    )
    events = b"".join(response.chunks).decode()

    assert response.status == 200
    done = json.loads(events.split("event: done\ndata: ", 1)[1].split("\n", 1)[0])
    assert done["output"] == "The order " + CUT_OFF_MARK
    assert done["recorded"] is True
    deltas = [
        json.loads(line.removeprefix("data: "))["text"]
        for block in events.split("\n\n")
        if block.startswith("event: delta")
        for line in block.splitlines()[1:]
    ]
    assert "".join(deltas) == done["output"]  # the client saw the cut too
    assert transcript(slow.api, slow.tenant, session_id)[-1]["content"] == done["output"]
    output = capsys.readouterr().out
    assert '"TurnDeadlineReached"' in output and '"outcome":"partial"' in output


def test_a_streamed_turns_idempotency_lock_expires_with_the_turn(slow: Slow) -> None:
    # Powertools derives the in-progress lock's expiry from the "Lambda context" it is
    # given: the door gives it the streamed turn's own time left, not a day.
    runner = slow.api.container.infrastructure.idempotency
    assert runner is not None
    seen: list[int] = []
    original = runner.config.register_lambda_context

    def register(context: object) -> None:
        seen.append(context.get_remaining_time_in_millis())  # type: ignore[attr-defined]
        original(context)  # type: ignore[arg-type]

    runner.config.register_lambda_context = register  # type: ignore[method-assign,assignment]
    door = StreamDoor(lambda: slow.api.container)

    response = door.handle(
        "POST",
        f"/v1/capabilities/{slow.capability}/predict/stream",
        {"authorization": f"Bearer {slow.tenant.token}", "idempotency-key": "k-1"},
        json.dumps({"input": "hello"}).encode(),
    )
    b"".join(response.chunks)

    # Two seconds of turn plus the time to record it.
    assert len(seen) == 1 and 0 < seen[0] <= 5_000
