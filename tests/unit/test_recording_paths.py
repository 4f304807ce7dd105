"""Where a turn goes when its transcript write keeps failing: the repair queue first,
then an asynchronous invocation of the repair function, else counted as lost; and what
an asynchronous repair does with its event."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.domain.errors import StoreUnavailable
from convo_memory.domain.jobs import RepairJob
from convo_memory.services.recording import RecordingPolicy, TurnRecorder
from tests.fakes.adapters import FakeQueue
from tests.fakes.app import WS, fake_app
from tests.support.turns import predict


class FakeInvoke:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.payloads: list[dict[str, Any]] = []

    def invoke(self, payload: dict[str, Any]) -> None:
        if self.fail:
            raise StoreUnavailable("Lambda is down")
        self.payloads.append(payload)


def _recorder(app: Any, queue: FakeQueue, fallback: FakeInvoke | None) -> TurnRecorder:
    return TurnRecorder(
        app.db.stores.turns,
        app.db.stores.sessions,
        queue,
        app.metrics,
        repair_fallback=fallback,
        sleep=lambda seconds: None,
    )


def _failing_turn(app: Any, recorder: TurnRecorder) -> Any:
    app.capability("cap-gen")
    sid = app.session("cap-gen")
    app.container.turns._endings._recorder = recorder
    app.db.fail_always["append_turn"] = StoreUnavailable("throttled")
    try:
        return sid, predict(app.container, WS, "cap-gen", "remember this", sid)
    finally:
        del app.db.fail_always["append_turn"]


def test_when_the_queue_fails_the_turn_goes_to_the_repair_function() -> None:
    app, queue, fallback = fake_app(), FakeQueue(), FakeInvoke()
    queue.fail_with = StoreUnavailable("SQS down")
    sid, prediction = _failing_turn(app, _recorder(app, queue, fallback))

    assert prediction.recorded is False
    assert queue.attempts == RecordingPolicy().handoff_attempts
    (payload,) = fallback.payloads
    assert RepairJob.model_validate(payload).session_id == sid
    assert app.metrics.counts["TranscriptRepairInvoked"] == 1
    assert app.metrics.counts["TranscriptLost"] == 0


def test_when_every_path_fails_the_turn_is_counted_lost() -> None:
    app, queue, fallback = fake_app(), FakeQueue(), FakeInvoke(fail=True)
    queue.fail_with = StoreUnavailable("SQS down")
    _failing_turn(app, _recorder(app, queue, fallback))

    assert app.metrics.counts["TranscriptLost"] == 1
    assert app.metrics.counts["TranscriptRepairEnqueueFailed"] == 1


def test_when_the_queue_takes_it_the_repair_function_is_not_invoked() -> None:
    app, queue, fallback = fake_app(), FakeQueue(), FakeInvoke()
    _failing_turn(app, _recorder(app, queue, fallback))

    assert len(queue.sent) == 1 and fallback.payloads == []


def test_an_asynchronous_repair_retries_then_queues_then_raises() -> None:
    app, queue = fake_app(), FakeQueue()
    recorder = _recorder(app, queue, FakeInvoke())
    app.capability("cap-gen")
    sid = app.session("cap-gen")
    job = RepairJob.model_validate(
        {
            "workspaceId": WS,
            "sessionId": sid,
            "turn": {
                "turnId": "t" * 32,
                "userContent": "hi",
                "answer": "hello",
                "withheld": False,
                "createdAt": "2025-01-01T12:00:00.000Z",
            },
        }
    )

    app.db.fail_next["append_turn"] = StoreUnavailable("throttled once")
    assert recorder.repair_async(job, lambda: 60.0) == "recorded"

    app.db.fail_always["append_turn"] = StoreUnavailable("throttled")
    assert recorder.repair_async(job.model_copy(update={"session_id": sid}), lambda: 60.0) in (
        "already_recorded",
    )
    other = job.model_copy(update={"turn": job.turn.model_copy(update={"turn_id": "u" * 32})})
    assert recorder.repair_async(other, lambda: 60.0) == "queued"
    assert len(queue.sent) == 1

    queue.fail_with = StoreUnavailable("SQS down")
    with pytest.raises(StoreUnavailable):
        recorder.repair_async(other, lambda: 60.0)
