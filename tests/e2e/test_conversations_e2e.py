"""Conversations over real HTTP against `python -m local_runtime`."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtime_process import RuntimeProcess

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"


def dev_token(runtime: RuntimeProcess) -> str:
    return runtime.tokens["dev"]


def new_session(runtime: RuntimeProcess, capability: str = "cap-generative") -> str:
    status, _, body = runtime.call(
        "POST",
        "/v1/sessions",
        token=dev_token(runtime),
        json={"capabilityId": capability, "externalRef": "e2e-user"},
    )
    assert status == 201, body
    return str(body["id"])


def transcript(runtime: RuntimeProcess, session_id: str) -> list[dict[str, Any]]:
    status, _, body = runtime.call(
        "GET", f"/v1/sessions/{session_id}/messages?limit=100", token=dev_token(runtime)
    )
    assert status == 200
    return list(body["messages"])


def test_the_readme_walkthrough_works_verbatim(local_runtime: RuntimeProcess) -> None:
    text = README.read_text()
    block = re.search(
        r"<!-- walkthrough:start -->\n```sh\n(.*?)```\n<!-- walkthrough:end -->", text, re.S
    )
    assert block, "README has no walkthrough block"
    env = {**os.environ, "BASE": local_runtime.base_url, "TOKEN": dev_token(local_runtime)}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.group(1)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    session_id = re.search(r"session: (\S+)", out)
    assert session_id, out
    assert (
        '"turn":{"assistantSeq":2,"userSeq":1}' in out
        and '"turn":{"assistantSeq":4,"userSeq":3}' in out
    )
    assert "event: delta" in out and "event: done" in out
    assert '"principal":{"tenant_id":"store-a","user_id":"u_913"}' in out  # the run trace
    assert '"toolDigests":[{"seq":2,"text":' in out and '"tools":["lookup_order"]' in out
    # The idempotent retry printed the same answer twice and recorded one turn.
    retries = [
        line for line in out.splitlines() if "Please cancel it." in line and '"output"' in line
    ]
    assert len(retries) == 2 and retries[0] == retries[1]
    assert len(transcript(local_runtime, session_id.group(1))) == 8


def test_sixteen_concurrent_turns_on_one_session_stay_contiguous(
    local_runtime: RuntimeProcess,
) -> None:
    session_id = new_session(local_runtime)

    def turn(i: int) -> tuple[int, Any]:
        status, _, body = local_runtime.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=dev_token(local_runtime),
            json={"input": f"racer {i}"},
        )
        return status, body

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(turn, range(16)))

    refused = [(s, b) for s, b in results if s != 200 or not b["recorded"]]
    assert refused == [], refused
    messages = transcript(local_runtime, session_id)
    assert [m["seq"] for m in messages] == list(range(1, 33))
    by_seq = {m["seq"]: m for m in messages}
    for _, body in results:
        user, answer = by_seq[body["turn"]["userSeq"]], by_seq[body["turn"]["assistantSeq"]]
        assert body["turn"]["assistantSeq"] == body["turn"]["userSeq"] + 1
        assert user["role"] == "user" and answer["role"] == "assistant"
        assert answer["content"] == body["output"] and user["content"] in body["output"]
    assert sorted(m["content"] for m in messages if m["role"] == "user") == sorted(
        f"racer {i}" for i in range(16)
    )


def test_three_doors_record_each_turn_once(local_runtime: RuntimeProcess) -> None:
    session_id = new_session(local_runtime)
    token = dev_token(local_runtime)
    local_runtime.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=token,
        json={"input": "one", "sessionId": session_id},
    )
    local_runtime.call(
        "POST", f"/v1/sessions/{session_id}/messages", token=token, json={"input": "two"}
    )
    local_runtime.call(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        token=token,
        json={"input": "three", "sessionId": session_id},
    )
    messages = transcript(local_runtime, session_id)
    assert [(m["seq"], m["role"]) for m in messages] == [
        (i + 1, "user" if i % 2 == 0 else "assistant") for i in range(6)
    ]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["one", "two", "three"]


def test_workspaces_are_isolated_over_http(local_runtime: RuntimeProcess) -> None:
    session_id = new_session(local_runtime)
    other = local_runtime.tokens["other"]
    for method, path in [
        ("GET", f"/v1/sessions/{session_id}"),
        ("GET", f"/v1/sessions/{session_id}/messages"),
        ("GET", f"/v1/sessions/{session_id}/context"),
    ]:
        status, _, body = local_runtime.call(method, path, token=other)
        assert (status, body["error"]["code"]) == (404, "session_not_found")
    status, _, body = local_runtime.call(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        token=other,
        json={"input": "x", "sessionId": session_id},
    )
    assert (status, body["error"]["code"]) == (404, "session_not_found")
