"""The sample events run as they are (issue 16, item 7): every file in events/, unchanged,
through the Lambda Invoke port of a started runtime, as

    aws lambda invoke --endpoint-url http://127.0.0.1:3001 --function-name <Fn> \\
      --payload fileb://events/<file> out.json

would send it. A runtime of its own: the events create, change and delete records in the
dev workspace, which other tests share.
"""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.runtime_process import DEV_TOKEN, REPO, RuntimeProcess, StartRuntime

pytestmark = pytest.mark.e2e

EVENTS = REPO / "events"
TABLE_ROW = re.compile(r"^\| `(?P<file>[a-z_]+\.json)` \| (?P<function>\w+) \|", re.M)


def event_functions() -> dict[str, str]:
    """events/README.md's table: event file -> function logical id."""
    text = (EVENTS / "README.md").read_text(encoding="utf-8")
    return {row["file"]: row["function"] for row in TABLE_ROW.finditer(text)}


def invoke(runtime: RuntimeProcess, function: str, payload: bytes) -> tuple[dict[str, Any], Any]:
    client = boto3.client(
        "lambda",
        endpoint_url=runtime.lambda_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 0}, read_timeout=60, connect_timeout=5),
    )
    response = client.invoke(FunctionName=function, Payload=payload)
    return response, json.loads(response["Payload"].read())


def is_http_event(event: dict[str, Any]) -> bool:
    return event.get("version") == "2.0" and "routeKey" in event and event.get("type") != "REQUEST"


def test_every_sample_event_invokes_cleanly_as_it_is(start_runtime: StartRuntime) -> None:
    runtime = start_runtime()
    functions = event_functions()
    assert set(functions) == {path.name for path in EVENTS.glob("*.json")}
    answered: dict[str, Any] = {}

    # In file order, as `for f in events/*.json` would run them.
    for name, function in sorted(functions.items()):
        payload = (EVENTS / name).read_bytes()
        event = json.loads(payload)

        response, result = invoke(runtime, function, payload)

        assert response["StatusCode"] == 200, name
        assert "FunctionError" not in response, (name, result)
        answered[name] = result
        if is_http_event(event):
            # The API Gateway response inside: the route's own 2xx (200, 201 or 204).
            assert 200 <= result["statusCode"] < 300, (name, result.get("body"))
        elif "Records" in event:
            assert result == {"batchItemFailures": []}, name

    # The ids the events name exist in ws-dev, and the session events ran after the delete
    # event (it deletes a session of its own): each read or changed the demo session.
    turn = json.loads(answered["session_message.json"]["body"])
    assert turn["sessionId"] == "ses-0000000000000000000000" and turn["turn"]["userSeq"] >= 1
    run = json.loads(answered["get_run.json"]["body"])
    assert (run["runId"], run["workspaceId"]) == ("run-0000000000000000000000", "ws-dev")
    session = json.loads(answered["get_session.json"]["body"])
    assert (session["id"], session["capabilityId"]) == ("ses-0000000000000000000000", "cap-agent")
    assert answered["delete_session.json"]["statusCode"] == 204
    get_deleted = (EVENTS / "get_session.json").read_text(encoding="utf-8")
    get_deleted = get_deleted.replace("ses-0000000000000000000000", "ses-1111111111111111111111")
    _, deleted = invoke(runtime, "ReadSessionsFunction", get_deleted.encode())
    assert deleted["statusCode"] == 404  # the delete event's own session is gone


def test_the_authorizer_event_names_the_dev_workspace_with_the_dev_token(
    local_runtime: RuntimeProcess,
) -> None:
    raw = (EVENTS / "authorizer.json").read_text(encoding="utf-8")

    _, as_is = invoke(local_runtime, "AuthorizerFunction", raw.encode())
    _, with_token = invoke(
        local_runtime, "AuthorizerFunction", raw.replace("dev-token", DEV_TOKEN).encode()
    )

    # "dev-token" is no workspace's token: authorized with no workspace (the route's 401).
    assert as_is == {"isAuthorized": True, "context": {"workspaceId": ""}}
    assert with_token == {"isAuthorized": True, "context": {"workspaceId": "ws-dev"}}
