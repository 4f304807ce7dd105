"""Least privilege, checked both ways against the stack CloudFormation would deploy
(template.yaml after the SAM transform):

- enough: every route, door and worker runs a realistic scenario in the in-process
  stack, every DynamoDB and SQS request is recorded with the function that made it, and
  each one must be allowed by that function's role (moto enforces no IAM, so without
  this a narrowed policy would only fail in production);
- no more: no role may scan, only the model callers may invoke models and only the
  configured ones, the authorizer reads token items only.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from convo_memory.doors.stream import StreamDoor
from convo_memory_client.files import multipart
from tests.support.aws_calls import AwsCallRecorder, table_arn
from tests.support.erasure_jobs import run_erasure_jobs, run_fork_copy_jobs
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace
from tests.support.sample_files import data_url, png
from tests.support.stack_template import (
    Request,
    Stack,
    allows,
    granted_actions,
    role_statements,
    transformed_template,
)

EVENTS = Path(__file__).resolve().parents[2] / "events"
FUNCTIONS = (
    "AuthorizerFunction",
    "CapabilitiesFunction",
    "CreateSessionFunction",
    "ReadSessionsFunction",
    "ModifySessionFunction",
    "PredictFunction",
    "StreamFunction",
    "SummarizeFunction",
    "RepairFunction",
    "RetentionFunction",
    "ErasuresFunction",
    "EraseEndUserFunction",
    "ForkSessionFunction",
    "ForkCopyFunction",
    "FilesFunction",
)
MODEL_CALLERS = {"PredictFunction", "StreamFunction", "SummarizeFunction"}


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack(transformed_template())


def _sqs_event(sample: str, bodies: list[str]) -> dict[str, Any]:
    template = json.loads((EVENTS / sample).read_text())["Records"][0]
    records = []
    for index, body in enumerate(bodies):
        record = copy.deepcopy(template)
        record |= {"messageId": f"m-{index}", "receiptHandle": f"rh-{index}", "body": body}
        records.append(record)
    return {"Records": records}


def _drain(api: InProcessApi, queue: str) -> list[str]:
    sqs = api.container.infrastructure.clients["sqs"]
    url = api.resources.queue_urls[queue]
    bodies: list[str] = []
    while True:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        messages = out.get("Messages", [])
        if not messages:
            return bodies
        for message in messages:
            bodies.append(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _retention_event(at: datetime) -> dict[str, Any]:
    event = json.loads((EVENTS / "retention_schedule.json").read_text())
    event["time"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return dict(event)


def _stream(
    api: InProcessApi,
    token: str,
    path: str,
    body: dict[str, Any],
    key: str,
    extra: dict[str, str] | None = None,
) -> str:
    door = StreamDoor(lambda: api.container)
    headers = {"authorization": f"Bearer {token}", "idempotency-key": key, **(extra or {})}
    response = door.handle("POST", path, headers, json.dumps(body).encode())
    text = b"".join(response.chunks).decode()
    assert response.status == 200, text
    return text


def run_every_function(api: InProcessApi, recorder: AwsCallRecorder) -> None:
    """One realistic pass over every route, door and worker, attributed by function."""
    invoke = api.invoke

    def attributed(function: str, event: dict[str, Any]) -> Any:
        with recorder.running(function):
            return invoke(function, event)

    api.invoke = attributed  # type: ignore[method-assign]
    workspace, token = new_workspace(api, "least-privilege")

    def call(method: str, path: str, status: int, **kwargs: Any) -> Any:
        response = api.call(method, path, token=token, **kwargs)
        assert response.status == status, (method, path, response.body)
        return response.body

    # Capabilities, providers, the not-found catch-all.
    capability = {
        "name": "short memory",
        "kind": "generative",
        "replay": {"maxMessages": 2, "maxChars": 10_000, "minMessages": 1},
    }
    cap_id = call("POST", "/v1/capabilities", 201, json_body=capability)["id"]
    call("GET", "/v1/capabilities", 200)
    call("GET", f"/v1/capabilities/{cap_id}", 200)
    call("GET", "/v1/providers", 200)
    call("GET", "/v1/nothing-here", 404)

    # Sessions, turns on every door, an agent's run trace, idempotent replays.
    opened = {"capabilityId": cap_id, "externalRef": "customer-1"}
    session = call("POST", "/v1/sessions", 201, json_body=opened)["id"]
    second = call("POST", "/v1/sessions", 201, json_body=opened)["id"]
    predict = f"/v1/capabilities/{cap_id}/predict"
    call("POST", predict, 200, json_body={"input": "stateless"})
    for text in ("one", "two", "three"):
        call("POST", predict, 200, json_body={"input": text, "sessionId": session})
    for _ in range(2):
        call(
            "POST",
            f"/v1/sessions/{session}/messages",
            200,
            json_body={"input": "keyed"},
            headers={"Idempotency-Key": "key-1"},
        )
    call("POST", f"{predict}/stream", 200, json_body={"input": "buffered", "sessionId": session})
    agent = call("POST", "/v1/capabilities/cap-agent/predict", 200, json_body={"input": "order 7"})
    call("GET", f"/v1/runs/{agent['runId']}", 200)
    with recorder.running("StreamFunction"):
        for _ in range(2):
            _stream(api, token, f"{predict}/stream", {"input": "s", "sessionId": session}, "k2")

    # The OpenAI-compatible door: a key's session opened, used, and opened again after
    # its session was marked deleted (the key still naming it), on both doors.
    chat = {"model": cap_id, "user": "customer-2", "messages": [{"role": "user", "content": "hi"}]}
    keyed = {"X-Convo-Session-Key": "conversation-1"}
    call("GET", "/v1/models", 200)
    call("POST", "/v1/chat/completions", 200, json_body=chat, headers=keyed)
    first = call("POST", "/v1/chat/completions", 200, json_body=chat, headers=keyed)
    api.container.adapters.stores.sessions.begin_deletion(
        first["convo"]["sessionId"], workspace, "now"
    )
    reopened = call("POST", "/v1/chat/completions", 200, json_body=chat, headers=keyed)
    assert reopened["convo"]["sessionId"] != first["convo"]["sessionId"]
    with recorder.running("StreamFunction"):
        streamed = {**chat, "stream": True}
        headers = {**keyed, "X-Convo-Session-Key": "conversation-2"}
        _stream(api, token, "/v1/chat/completions", streamed, "k3", headers)
        _stream(api, token, "/v1/chat/completions", streamed, "k4", headers)

    # The read-only session routes, paged; then a change and a deletion.
    listed = call("GET", "/v1/sessions", 200, query={"externalRef": "customer-1", "limit": 1})
    call(
        "GET",
        "/v1/sessions",
        200,
        query={"externalRef": "customer-1", "limit": 1, "nextToken": listed["nextToken"]},
    )
    call("GET", f"/v1/sessions/{session}", 200)
    page = call("GET", f"/v1/sessions/{session}/messages", 200, query={"limit": 2})
    call(
        "GET",
        f"/v1/sessions/{session}/messages",
        200,
        query={"limit": 2, "nextToken": page["nextToken"]},
    )
    call("GET", f"/v1/sessions/{session}/context", 200)
    call("PATCH", f"/v1/sessions/{session}", 200, json_body={"metadata": {"plan": "pro"}})
    call("DELETE", f"/v1/sessions/{second}", 204)

    # Forks: one whose older messages a job copies, a fork of it (made through it while
    # that copy is due, its own copy after it), what a turn was sent; a parent deleted
    # with its fork's copy still due.
    forked = call("POST", f"/v1/sessions/{session}/forks", 201, json_body={"atSeq": 4})["id"]
    call("POST", f"/v1/sessions/{forked}/forks", 201, json_body={"atSeq": 2})
    call("GET", f"/v1/sessions/{forked}/messages", 200)
    assert run_fork_copy_jobs(api)
    call("GET", f"/v1/sessions/{session}/messages/2/prompt", 200)
    doomed = call("POST", "/v1/sessions", 201, json_body=opened)["id"]
    for text in ("a", "b", "c"):
        call("POST", f"/v1/sessions/{doomed}/messages", 200, json_body={"input": text})
    call("POST", f"/v1/sessions/{doomed}/forks", 201, json_body={"atSeq": 6})
    call("DELETE", f"/v1/sessions/{doomed}", 204)

    run_attachments(call, recorder, api, token)

    # Recall: a session opened on a capability with recall reads the earlier ones.
    recalling = {**capability, "name": "recalls", "recall": {"sessions": 2}}
    recall_cap = call("POST", "/v1/capabilities", 201, json_body=recalling)["id"]
    earlier = call("POST", "/v1/sessions", 201, json_body={**opened, "capabilityId": recall_cap})
    call("POST", f"/v1/sessions/{earlier['id']}/messages", 200, json_body={"input": "remember"})
    later = call("POST", "/v1/sessions", 201, json_body={**opened, "capabilityId": recall_cap})
    assert call("GET", f"/v1/sessions/{later['id']}/context", 200)["recall"] is not None

    # The summary worker, on a job for the session whose window omits messages.
    job = json.dumps({"workspaceId": workspace, "sessionId": session})
    api.invoke("SummarizeFunction", _sqs_event("summarize_sqs.json", [job]))

    # The repair worker, on a turn whose transcript write failed.
    repaired = {"input": "repair me", "sessionId": session}
    with _failing(api, "PutItem"):
        answer = call("POST", predict, 200, json_body=repaired)
    assert answer["recorded"] is False, answer
    repairs = _drain(api, "RepairQueue")
    assert repairs
    api.invoke("RepairFunction", _sqs_event("repair_sqs.json", repairs))

    # An end user erased with their traces (a keyed turn, an agent run, a failed one,
    # an image), the receipt read back; the worker finishes it and runs every delayed
    # sweep (the deletion's above included).
    gone = {"capabilityId": "cap-agent", "externalRef": "customer-erased"}
    erased = call("POST", "/v1/sessions", 201, json_body=gone)["id"]
    image = {"type": "image_url", "image_url": {"url": data_url("image/png", png(seed=7))}}
    chat = {"model": "cap-agent", "messages": [{"role": "user", "content": [image]}]}
    call(
        "POST", "/v1/chat/completions", 200, json_body=chat, headers={"X-Convo-Session-Id": erased}
    )
    agent_turn = {"input": "order 7", "sessionId": erased}
    call("POST", "/v1/capabilities/cap-agent/predict", 200, json_body=agent_turn,
         headers={"Idempotency-Key": "erased-1"})  # fmt: skip
    erasure = {"externalRef": "customer-erased", "traces": "erase"}
    receipt = call("POST", "/v1/erasures", 202, json_body=erasure)
    call("GET", f"/v1/erasures/{receipt['id']}", 200)
    run_erasure_jobs(api, sweeps=True)
    assert call("GET", f"/v1/erasures/{receipt['id']}", 200)["status"] == "done"

    # The retention run: archive the idle session, purge it (finishing the copy still
    # due to a fork of it), finish the deletion.
    call("POST", f"/v1/sessions/{session}/forks", 201, json_body={"atSeq": 6})
    now = datetime.now(UTC)
    for days in (8, 40, 80):
        api.invoke("RetentionFunction", _retention_event(now + timedelta(days=days)))


def _uploaded(call: Any, data: bytes, *extra: tuple[str, str]) -> str:
    body, content_type = multipart({"purpose": "vision", **dict(extra)}, "p.png", data, "image/png")
    headers = {"content-type": content_type}
    return str(call("POST", "/v1/files", 200, raw_body=body, headers=headers)["id"])


def run_attachments(call: Any, recorder: AwsCallRecorder, api: InProcessApi, token: str) -> None:
    """(v5) Files uploaded, read and deleted (one expiring, for the retention run); images
    on the turn doors (the streaming one too), a fork sharing them, a deletion releasing
    them."""
    file_id = _uploaded(call, png(seed=1))
    _uploaded(
        call,
        png(seed=2),
        ("expires_after[anchor]", "created_at"),
        ("expires_after[seconds]", "3600"),
    )
    call("GET", "/v1/files", 200)
    call("GET", f"/v1/files/{file_id}", 200)
    call("GET", f"/v1/files/{file_id}/content", 200)
    opened = {"capabilityId": "cap-generative", "externalRef": "customer-images"}
    session = call("POST", "/v1/sessions", 201, json_body=opened)["id"]
    image = {"type": "image_url", "image_url": {"url": data_url("image/png", png(seed=3))}}
    chat = {"model": "cap-generative", "messages": [{"role": "user", "content": [image]}]}
    call(
        "POST", "/v1/chat/completions", 200, json_body=chat, headers={"X-Convo-Session-Id": session}
    )
    with recorder.running("StreamFunction"):
        body = {"input": "and this", "sessionId": session, "attachments": [{"fileId": file_id}]}
        _stream(api, token, "/v1/capabilities/cap-generative/predict/stream", body, "k-img")
    fork = call("POST", f"/v1/sessions/{session}/forks", 201, json_body={"atSeq": 2})["id"]
    call("DELETE", f"/v1/files/{file_id}", 200)
    call("DELETE", f"/v1/sessions/{session}", 204)
    call("DELETE", f"/v1/sessions/{fork}", 204)


class _failing:
    """Every ``operation`` on the stack's DynamoDB client fails with a 5xx inside."""

    def __init__(self, api: InProcessApi, operation: str) -> None:
        self.client = api.container.infrastructure.clients["dynamodb"]
        self.event = f"before-call.dynamodb.{operation}"

    def _fail(self, **_: Any) -> Any:
        from tests.support.faults import dynamodb_error

        return dynamodb_error("InternalServerError", 500)

    def __enter__(self) -> None:
        self.client.meta.events.register_first(self.event, self._fail)

    def __exit__(self, *exc: object) -> None:
        self.client.meta.events.unregister(self.event, self._fail)


@pytest.fixture(scope="module")
def recorded() -> Iterator[dict[str, list[Request]]]:
    recorder = AwsCallRecorder()
    # No in-container caches: in one process they would let a function ride on reads
    # another function made, which on AWS it makes itself.
    with inprocess_stack({"CACHE_TTL_SECONDS": "0"}) as api:
        clients = api.container.infrastructure.clients
        buckets = {name: logical for logical, name in api.resources.buckets.items()}
        recorder.attach(clients["dynamodb"], clients["sqs"], clients["s3"], buckets)
        run_every_function(api, recorder)
        yield dict(recorder.by_function)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_request_a_function_makes_is_allowed_by_its_role(
    stack: Stack, recorded: dict[str, list[Request]], function: str
) -> None:
    requests = recorded.get(function, [])
    statements = role_statements(stack, function)

    assert requests, f"the scenario never ran {function}"
    refused = sorted({str(request) for request in requests if not allows(statements, request)})
    assert refused == [], f"{function} would be refused:\n" + "\n".join(refused)


@pytest.mark.parametrize("function", [*FUNCTIONS, "StudioFunction"])
def test_no_role_may_scan_or_use_a_service_wildcard(stack: Stack, function: str) -> None:
    actions = granted_actions(role_statements(stack, function))

    assert not any(action.lower() in ("dynamodb:scan", "dynamodb:*", "*") for action in actions)
    assert not any(action.endswith(":*") for action in actions), actions


def test_the_authorizer_reads_token_items_and_nothing_else(stack: Stack) -> None:
    statements = role_statements(stack, "AuthorizerFunction")
    table = table_arn("ConversationsTable")

    def may(action: str, key: str, resource: str = table) -> bool:
        return allows(statements, Request(action, resource, {"dynamodb:LeadingKeys": (key,)}))

    assert may("dynamodb:GetItem", "TOKEN#" + "ab" * 32)
    assert not may("dynamodb:GetItem", "SESSION#ses_123")
    assert not may("dynamodb:GetItem", "WS#ws_1")
    assert not may("dynamodb:Query", "TOKEN#" + "ab" * 32)
    assert not may("dynamodb:PutItem", "TOKEN#" + "ab" * 32)
    assert not may("dynamodb:GetItem", "x", table_arn("RunsTable"))


@pytest.mark.parametrize(
    "function",
    [
        "CapabilitiesFunction",
        "CreateSessionFunction",
        "ModifySessionFunction",
        "ErasuresFunction",
        "EraseEndUserFunction",
        "ForkSessionFunction",
        "ForkCopyFunction",
    ],
)
def test_functions_that_call_no_model_may_not_invoke_one(stack: Stack, function: str) -> None:
    statements = role_statements(stack, function)
    model = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku"

    assert not allows(statements, Request("bedrock:InvokeModel", model))


@pytest.mark.parametrize("function", sorted(MODEL_CALLERS))
def test_model_callers_may_invoke_only_the_configured_models(stack: Stack, function: str) -> None:
    by_default = role_statements(stack, function)
    pinned = role_statements(
        Stack(
            stack.template,
            {"BedrockModelArns": "arn:aws:bedrock:eu-west-1::foundation-model/anthropic.*"},
        ),
        function,
    )
    here = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku"
    elsewhere = "arn:aws:bedrock:eu-west-1::foundation-model/anthropic.claude-3-5-haiku"
    profile = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude"

    # By default: the stack's region (and the account's inference profiles there) only.
    assert allows(by_default, Request("bedrock:InvokeModel", here))
    assert allows(by_default, Request("bedrock:InvokeModel", profile))
    assert not allows(by_default, Request("bedrock:InvokeModel", elsewhere))
    # With BedrockModelArns: exactly those.
    assert allows(pinned, Request("bedrock:InvokeModel", elsewhere))
    assert not allows(pinned, Request("bedrock:InvokeModel", here))
    assert not allows(
        pinned,
        Request(
            "bedrock:InvokeModel", "arn:aws:bedrock:eu-west-1::foundation-model/amazon.nova-pro"
        ),
    )
