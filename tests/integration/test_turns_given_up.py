"""A turn refused at its first second (its workspace holds its cap of slow turns) is given
up mid-way, through the real handlers and doors on moto: a stream that has begun ends
with an error event carrying ``rate_limited``, and nothing of the turn is recorded,
although its model goes on writing chunks for a while on the turn's own thread.

The turn limiter is the production one with the test deciding when a turn's first second
has passed (``first_second``): once the client has read the stream's first delta, and
the workspace's places have been taken meanwhile, as other environments' slow turns
would."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
from convo_memory.adapters.dynamo.slow_turns import SlowTurnCap, SlowTurns
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.bootstrap import Adapters, Infrastructure
from convo_memory.doors.stream import StreamDoor
from tests.fakes.adapters import FakeMetrics
from tests.support.inprocess_api import InProcessApi, environment, inprocess_stack, new_workspace
from tests.support.tenants import Tenant

CAP = 2


class ClientReadTheFirstDelta:
    """``first_second``: the turn's first second passes once the test says so."""

    def __init__(self) -> None:
        self.passed = threading.Event()

    def __call__(self, done: threading.Event, seconds: float) -> bool:
        self.passed.wait(30)
        return done.is_set()


@pytest.fixture
def first_second() -> ClientReadTheFirstDelta:
    return ClientReadTheFirstDelta()


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def slow_turns() -> dict[str, SlowTurns]:
    return {}


@pytest.fixture
def api(
    first_second: ClientReadTheFirstDelta, metrics: FakeMetrics, slow_turns: dict[str, SlowTurns]
) -> Iterator[InProcessApi]:
    def watched(adapters: Adapters, infrastructure: Infrastructure) -> Adapters:
        table = DynamoTable(
            infrastructure.clients["dynamodb"], os.environ["TURN_LIMITS_TABLE_NAME"]
        )
        slow = slow_turns["limiter"] = SlowTurns(
            table,
            SlowTurnCap(CAP, 300),
            metrics,
            time.time,
            item_expiry_seconds=360,
            rate=1000,
            first_second=first_second,
        )
        limiter = WorkspaceRateLimiter(table, RateLimit(1000, 1000), metrics, time.time, slow)
        return replace(adapters, turn_limiter=limiter)

    # A slow model: each streamed chunk comes 200 ms after the one before.
    with (
        environment({"CONVO_EMBEDDED_CHUNK_DELAY_MS": "200"}),
        inprocess_stack(adapt=watched) as stack,
    ):
        yield stack


def _places_taken(slow: SlowTurns, workspace_id: str) -> None:
    """The workspace's slow-turn places, all taken (by turns of other environments)."""
    for _ in range(CAP):
        assert not slow.register(workspace_id, slow.new_entry(60)).refused


def _stream(
    api: InProcessApi, token: str, path: str, body: dict[str, Any], headers: dict[str, str]
) -> Iterator[bytes]:
    response = StreamDoor(lambda: api.container).handle(
        "POST", path, {"authorization": f"Bearer {token}", **headers}, json.dumps(body).encode()
    )
    assert response.status == 200  # the stream began
    return response.chunks


@pytest.mark.parametrize("door", ["predict/stream", "chat/completions"])
def test_a_stream_that_has_begun_ends_with_rate_limited_and_nothing_is_recorded(
    api: InProcessApi,
    first_second: ClientReadTheFirstDelta,
    metrics: FakeMetrics,
    slow_turns: dict[str, SlowTurns],
    door: str,
) -> None:
    tenant = Tenant(*new_workspace(api, "held back"))
    created = api.call(
        "POST",
        "/v1/sessions",
        token=tenant.token,
        json_body={"capabilityId": "cap-generative", "externalRef": "customer-1"},
    )
    session_id = created.body["id"]
    text = "tell me everything about my order 12345 and its journey so far, please"
    headers: dict[str, str] = {}
    if door == "predict/stream":
        path = "/v1/capabilities/cap-generative/predict/stream"
        body: dict[str, Any] = {"input": text, "sessionId": session_id}
    else:
        path, headers = "/v1/chat/completions", {"x-convo-session-id": session_id}
        body = {
            "model": "cap-generative",
            "stream": True,
            "messages": [{"role": "user", "content": text}],
        }

    chunks = _stream(api, tenant.token, path, body, headers)
    first = next(chunks).decode()
    _places_taken(slow_turns["limiter"], tenant.workspace_id)  # meanwhile, elsewhere
    first_second.passed.set()  # the client has the stream's beginning; a second passed
    rest = b"".join(chunks).decode()

    assert "event: delta" in first or "chat.completion.chunk" in first
    assert "rate_limited" in rest and "slow turns in flight" in rest
    assert "event: done" not in rest and '"finish_reason":"stop"' not in rest
    assert metrics.counts["TurnsOverSlowCap"] == 1
    head = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    assert head["messageCount"] == 0  # nothing of the turn was recorded
