"""One tenant's slow turns do not starve another's, over HTTP on ``python -m local_runtime``
(``CONVO_WORKSPACE_MAX_SLOW_TURNS=10``): workspace "dev" starts ten agent turns whose
webhook tool trickles its headers (each turn held until the test lets go); once the ten
count as slow, the eleventh is ``429 rate_limited`` with ``Retry-After`` on the HttpApi
and on the streaming door, while workspace "other" has its turns served, before any of
the ten has ended. Then the ten end, and "dev" is served again.

Then forty slow turns released together in "dev" (v5): at their first second ten find a
place and thirty are refused at once, writing nothing; at most the cap (plus two) run on
past two seconds, and "other" is served meanwhile. (The runtime runs PredictFunction in
as many copies as the template reserves it: 50.)"""

from __future__ import annotations

import json
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
def burst_trickler() -> Iterator[HeaderTrickler]:
    with HeaderTrickler(interval=0.5, duration=60) as server:
        yield server


@pytest.fixture(scope="module")
def runtime(trickler: HeaderTrickler, burst_trickler: HeaderTrickler) -> Iterator[RuntimeProcess]:
    process = launch_runtime(
        {
            "CONVO_TOOL_ALLOWED_HOSTS": f"{trickler.host},{burst_trickler.host}",
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


BURST = 40


def _run_traces(runtime: RuntimeProcess, session_id: str) -> int:
    """The agent run traces the runtime's runs table holds for ``session_id``."""
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    table = ensure_resources(session, endpoint_url=runtime.aws_endpoint).tables["RunsTable"]
    dynamodb = session.client("dynamodb", endpoint_url=runtime.aws_endpoint)
    items = dynamodb.scan(TableName=table)["Items"]
    return sum(json.loads(item["body"]["S"]).get("sessionId") == session_id for item in items)


def _given_up(runtime: RuntimeProcess) -> int:
    """Turns the runtime logged as given up and stopped, writing nothing."""
    return runtime.stdout.count("a turn given up at its first second stopped")


def test_forty_slow_turns_released_together_are_capped_at_their_first_second(
    runtime: RuntimeProcess, burst_trickler: HeaderTrickler
) -> None:
    dev, other = runtime.tokens["dev"], runtime.tokens["other"]
    tool = {"name": "order", "description": "Orders", "inputSchema": SCHEMA}
    agent = _capability(
        runtime,
        dev,
        {"name": "held desk", "kind": "agent", "tools": [{**tool, "url": burst_trickler.url()}]},
    )
    status, _, held = runtime.call(
        "POST", "/v1/sessions", token=dev, json={"capabilityId": agent, "externalRef": "a-40"}
    )
    assert status == 201, held
    fast = _capability(runtime, other, {"name": "quick chat", "kind": "generative"})
    status, _, session = runtime.call(
        "POST", "/v1/sessions", token=other, json={"capabilityId": fast, "externalRef": "b-40"}
    )
    assert status == 201, session

    answers: list[tuple[int, dict[str, str], Any, float]] = []
    start = threading.Barrier(BURST + 1)
    given_up_before = _given_up(runtime)

    def slow_turn() -> None:
        start.wait()
        status, headers, body = runtime.call(
            "POST", f"/v1/sessions/{held['id']}/messages", token=dev, json={"input": "my order?"}
        )
        answers.append((status, headers, body, time.monotonic()))

    threads = [threading.Thread(target=slow_turn) for _ in range(BURST)]
    for thread in threads:
        thread.start()
    start.wait()
    released = time.monotonic()
    try:
        # Every turn has had its first second: it holds a place, or was refused.
        wait_for(lambda: _slow_entries(runtime) + len(answers) == BURST, 30, "40 decisions")
        time.sleep(max(0.0, released + 2 - time.monotonic()))  # two seconds on
        refused = [answer for answer in answers if answer[0] == 429]
        past_two_seconds = BURST - len(answers)
        held_places = _slow_entries(runtime)

        # The other workspace meanwhile: served, each turn, while the held turns stall.
        served = []
        for text in ("hello", "still there?", "thanks"):
            began = time.monotonic()
            code, _, _ = runtime.call(
                "POST", f"/v1/sessions/{session['id']}/messages", token=other, json={"input": text}
            )
            served.append((code, time.monotonic() - began, time.monotonic()))
        still_held = BURST - len(answers)
    finally:
        burst_trickler.stop()  # the tool calls fail now, and the held turns end
        for thread in threads:
            thread.join(30)

    assert past_two_seconds <= CAP + 2 and held_places <= CAP
    assert len(refused) >= BURST - CAP - 2 and still_held == past_two_seconds
    for _, headers, body, _ in refused:
        assert body["error"]["code"] == "rate_limited" and headers["retry-after"] == "1"
        assert "slow turns in flight" in body["error"]["message"]
    assert [code for code, _, _ in served] == [200, 200, 200]
    ended = [at for status, _, _, at in answers if status == 200]
    assert len(ended) == BURST - len(refused) and max(at for _, _, at in served) < min(ended)
    print(f"other workspace's turns meanwhile: {[round(took, 3) for _, took, _ in served]} s")

    # Nothing of a refused turn was recorded: its thread stopped without a write.
    wait_for(
        lambda: _given_up(runtime) >= given_up_before + len(refused),
        30,
        "the given-up turns to stop",
    )
    status, _, head = runtime.call("GET", f"/v1/sessions/{held['id']}", token=dev)
    assert head["messageCount"] == 2 * len(ended)
    assert _run_traces(runtime, held["id"]) == len(ended)
    assert _slow_entries(runtime) == 0
