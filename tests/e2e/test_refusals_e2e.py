"""A refused call opens nothing (v5), over HTTP against the shared ``make run``: the chat
door's first call on a new ``X-Convo-Session-Key`` whose tool results answer no pause is
``409 tool_calls_mismatch`` and leaves no session and no key binding; after the end
user's erasure the same call leaves nothing in the service's tables that carries them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest

from local_runtime.aws_resources import DEFAULT_PREFIX
from tests.support.runtime_process import DEV_TOKEN, RuntimeProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
CONTINUATION = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


def chat(runtime: RuntimeProcess, key: str, user: str, messages: list[Any]) -> tuple[int, Any]:
    body = {"model": "cap-generative", "user": user, "messages": messages}
    status, _, answer = runtime.call(
        "POST",
        "/v1/chat/completions",
        token=DEV_TOKEN,
        json=body,
        headers={"X-Convo-Session-Key": key},
    )
    return status, answer


def sessions_of(runtime: RuntimeProcess, user: str) -> list[Any]:
    status, _, listed = runtime.call("GET", f"/v1/sessions?externalRef={user}", token=DEV_TOKEN)
    assert status == 200, listed
    return list(listed["sessions"])


def items_naming(runtime: RuntimeProcess, text: str) -> list[dict[str, Any]]:
    """Every item of the service's tables whose stored text holds ``text`` (a scan of
    the runtime's emulated DynamoDB)."""
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=runtime.aws_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    found = []
    for table in ("ConversationsTable", "RunsTable", "IdempotencyTable"):
        for page in dynamodb.get_paginator("scan").paginate(TableName=DEFAULT_PREFIX + table):
            found += [item for item in page["Items"] if text in json.dumps(item)]
    return found


def test_a_refused_first_call_on_a_new_key_opens_nothing_before_and_after_an_erasure(
    local_runtime: RuntimeProcess,
) -> None:
    user, key = f"refused-{uuid.uuid4().hex[:10]}", f"key-{uuid.uuid4().hex[:10]}"

    status, refused = chat(local_runtime, key, user, CONTINUATION)

    assert (status, refused["error"]["code"]) == (409, "tool_calls_mismatch")
    assert sessions_of(local_runtime, user) == [] and items_naming(local_runtime, key) == []

    # The key's session, opened by a call that can be served, then its end user erased.
    status, served = chat(local_runtime, key, user, CONTINUATION[:1])
    assert status == 200, served
    status, _, erasure = local_runtime.call(
        "POST", "/v1/erasures", token=DEV_TOKEN, json={"externalRef": user}
    )
    assert status == 202, erasure

    def done() -> bool:
        path = f"/v1/erasures/{erasure['id']}"
        return bool(local_runtime.call("GET", path, token=DEV_TOKEN)[2]["status"] == "done")

    wait_for(done, 30.0, "the erasure", every=0.1)
    status, again = chat(local_runtime, key, user, CONTINUATION)

    assert (status, again["error"]["code"]) == (409, "tool_calls_mismatch")
    assert sessions_of(local_runtime, user) == []
    # Only the erasure's own receipt names the end user (kept ErasureReceiptDays).
    left = items_naming(local_runtime, user)
    assert [item["sk"]["S"] for item in left] == [f"ERASURE#{erasure['id']}"], left
    assert items_naming(local_runtime, key) == []
