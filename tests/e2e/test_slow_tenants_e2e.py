"""One tenant's slow turns do not starve another's, over HTTP on ``python -m local_runtime``
(``CONVO_WORKSPACE_MAX_SLOW_TURNS=10``): workspace "dev" starts ten agent turns whose
webhook tool trickles its headers (each turn held until the test lets go); once the ten
count as slow, the eleventh is ``429 rate_limited`` with ``Retry-After`` on the HttpApi
and on the streaming door, while workspace "other" has its turns served, before any of
the ten has ended. Then the ten end, and "dev" is served again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from local_runtime.aws_resources import ensure_resources
from tests.fakes.trickle_server import HeaderTrickler
from tests.support.runtime_process import RuntimeProcess, launch_runtime
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
CAP = 10
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}


@pytest.fixture(scope="module")
def trickler() -> Iterator[HeaderTrickler]:
    with HeaderTrickler(interval=0.5, duration=60) as server:
        yield server


@pytest.fixture(scope="module")
def runtime(trickler: HeaderTrickler) -> Iterator[RuntimeProcess]:
    process = launch_runtime(
        {
            "CONVO_TOOL_ALLOWED_HOSTS": trickler.host,
            "CONVO_WORKSPACE_MAX_SLOW_TURNS": str(CAP),
            # The trickled tool calls hold their turns until the test lets go (or 20 s),
            # however slowly a loaded machine gets there.
            "TOOL_TIMEOUT_SECONDS": "20",
        }
    )
    try:
        yield process
    finally:
        process.assert_stopped_cleanly()


def _capability(runtime: RuntimeProcess, token: str, body: dict[str, Any]) -> str:
    status, _, created = runtime.call("POST", "/v1/capabilities", token=token, json=body)
    assert status == 201, created
    return str(created["id"])


def _slow_entries(runtime: RuntimeProcess) -> int:
    """The slow turns the runtime's turn-limits table holds, all workspaces together."""
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    table = ensure_resources(session, endpoint_url=runtime.aws_endpoint).tables["TurnLimitsTable"]
    dynamodb = session.client("dynamodb", endpoint_url=runtime.aws_endpoint)
    items = dynamodb.scan(TableName=table)["Items"]
    return sum(len(item.get("slow", {}).get("SS", [])) for item in items)


def test_a_tenants_slow_turns_are_capped_and_another_tenant_is_served_meanwhile(
    runtime: RuntimeProcess, trickler: HeaderTrickler
) -> None:
    dev, other = runtime.tokens["dev"], runtime.tokens["other"]
    tool = {"name": "order", "description": "Orders", "inputSchema": SCHEMA}
    agent = _capability(
        runtime,
        dev,
        {"name": "stalled desk", "kind": "agent", "tools": [{**tool, "url": trickler.url()}]},
    )
    fast = _capability(runtime, other, {"name": "chat", "kind": "generative"})
    status, _, session = runtime.call(
        "POST", "/v1/sessions", token=other, json={"capabilityId": fast, "externalRef": "b-1"}
    )
    assert status == 201, session

    slow_answers: list[tuple[int, float]] = []

    def slow_turn() -> None:
        status, _, _ = runtime.call(
            "POST", f"/v1/capabilities/{agent}/predict", token=dev, json={"input": "my order?"}
        )
        slow_answers.append((status, time.monotonic()))

    threads = [threading.Thread(target=slow_turn) for _ in range(CAP)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: _slow_entries(runtime) == CAP, 15, f"{CAP} slow turns counted")

        # The eleventh: refused on the HttpApi and on the streaming door alike.
        status, headers, refused = runtime.call(
            "POST", f"/v1/capabilities/{agent}/predict", token=dev, json={"input": "my order?"}
        )
        stream_status, stream_headers, streamed = runtime.call(
            "POST",
            "/v1/chat/completions",
            token=dev,
            json={"model": agent, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )

        # The other workspace meanwhile: served, each turn, while all ten still stall.
        served = []
        for text in ("hello", "still there?", "thanks"):
            answer = runtime.call(
                "POST", f"/v1/sessions/{session['id']}/messages", token=other, json={"input": text}
            )
            served.append((answer[0], time.monotonic()))
        assert slow_answers == []  # none of the ten has ended yet
    finally:
        trickler.stop()  # the tool calls fail now, and the ten turns end
        for thread in threads:
            thread.join(30)

    assert status == 429 and refused["error"]["code"] == "rate_limited"
    assert headers["retry-after"] == "1" and "slow turns in flight" in refused["error"]["message"]
    assert stream_status == 429 and streamed["error"]["type"] == "rate_limit_error"
    assert stream_headers["retry-after"] == "1"
    assert [code for code, _ in served] == [200, 200, 200]
    assert [code for code, _ in slow_answers] == [200] * CAP
    assert max(at for _, at in served) < min(at for _, at in slow_answers)

    # Every slow turn took its entry with it: the workspace is served again.
    assert _slow_entries(runtime) == 0
    status, _, _ = runtime.call(
        "POST", f"/v1/capabilities/{fast}/predict", token=other, json={"input": "bye"}
    )
    assert status == 200
    status, _, answer = runtime.call(
        "POST", f"/v1/capabilities/{agent}/predict", token=dev, json={"input": "anything new?"}
    )
    assert status == 200, answer
