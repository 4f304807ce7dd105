"""The local runtime as a user meets it: ``python -m local_runtime``, then HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.config import Config

from local_runtime.aws_resources import load_template
from tests.support.runtime_process import (
    DEV_TOKEN,
    OTHER_TOKEN,
    REPO,
    RuntimeProcess,
    StartRuntime,
    free_port,
    launch_runtime,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


def lambda_client(runtime: RuntimeProcess) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=runtime.lambda_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 0}, read_timeout=30, connect_timeout=5),
    )


def authorizer_event(token: str) -> dict[str, Any]:
    """events/authorizer.json with this token, or an event of that shape."""
    sample = REPO / "events" / "authorizer.json"
    if sample.is_file():
        event: dict[str, Any] = json.loads(sample.read_text(encoding="utf-8"))
    else:
        event = {
            "version": "2.0",
            "type": "REQUEST",
            "routeArn": (
                "arn:aws:execute-api:us-east-1:123456789012:local/$default/GET/v1/capabilities"
            ),
            "routeKey": "GET /v1/capabilities",
            "rawPath": "/v1/capabilities",
            "rawQueryString": "",
            "headers": {},
            "requestContext": {"http": {"method": "GET", "path": "/v1/capabilities"}},
        }
    event["identitySource"] = [f"Bearer {token}"]
    event.setdefault("headers", {})["authorization"] = f"Bearer {token}"
    return event


def invoke(runtime: RuntimeProcess, function: str, event: Any) -> tuple[dict[str, Any], Any]:
    response = lambda_client(runtime).invoke(FunctionName=function, Payload=json.dumps(event))
    return response, json.loads(response["Payload"].read())


# --------------------------------------------------------------------------- the API


def test_an_unknown_route_is_404_not_found(local_runtime: RuntimeProcess) -> None:
    status, headers, body = local_runtime.call("GET", "/v1/nothing-here", token=DEV_TOKEN)

    assert status == 404
    assert headers["content-type"] == "application/json"
    assert body["error"]["code"] == "not_found"
    assert body["error"]["message"]


def test_an_unknown_route_is_404_even_without_a_token(local_runtime: RuntimeProcess) -> None:
    status, _, body = local_runtime.call("DELETE", "/v1/capabilities")

    assert status == 404
    assert body["error"]["code"] == "not_found"


def test_a_request_without_a_token_is_401_unauthorized(local_runtime: RuntimeProcess) -> None:
    status, headers, body = local_runtime.call("GET", "/v1/capabilities")

    assert status == 401
    assert headers["content-type"] == "application/json"
    assert body["error"]["code"] == "unauthorized"
    assert body["error"]["message"]


def test_an_unknown_token_is_401_unauthorized(local_runtime: RuntimeProcess) -> None:
    status, _, body = local_runtime.call(
        "GET", "/v1/capabilities", token="not-a-token-of-any-workspace"
    )

    assert status == 401
    assert body["error"]["code"] == "unauthorized"


def test_each_seeded_workspace_has_one_capability_of_each_kind(
    local_runtime: RuntimeProcess,
) -> None:
    for token in (DEV_TOKEN, OTHER_TOKEN):
        status, _, body = local_runtime.call("GET", "/v1/capabilities", token=token)

        assert status == 200, body
        # Other tests share this runtime and may add capabilities of their own.
        kinds = {
            cap["id"]: cap["kind"] for cap in body["capabilities"] if cap["id"].startswith("cap-")
        }
        assert kinds == {
            "cap-generative": "generative",
            "cap-agent": "agent",
            "cap-classic": "classic",
        }


# --------------------------------------------------------------------------- Lambda API


def test_the_lambda_api_invokes_the_authorizer_like_start_lambda(
    local_runtime: RuntimeProcess,
) -> None:
    response, dev = invoke(local_runtime, "AuthorizerFunction", authorizer_event(DEV_TOKEN))
    _, other = invoke(local_runtime, "AuthorizerFunction", authorizer_event(OTHER_TOKEN))
    _, unknown = invoke(local_runtime, "AuthorizerFunction", authorizer_event("x" * 24))

    assert response["StatusCode"] == 200
    assert "FunctionError" not in response
    assert dev["isAuthorized"] is True
    assert dev["context"]["workspaceId"]
    assert other["context"]["workspaceId"] not in ("", dev["context"]["workspaceId"])
    assert unknown == {"isAuthorized": True, "context": {"workspaceId": ""}}


def test_the_lambda_api_answers_404_for_an_unknown_function(
    local_runtime: RuntimeProcess,
) -> None:
    client = lambda_client(local_runtime)

    with pytest.raises(client.exceptions.ResourceNotFoundException) as raised:
        client.invoke(FunctionName="NoSuchFunction", Payload=b"{}")

    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert "NoSuchFunction" in str(raised.value)


def test_the_lambda_api_refuses_a_payload_that_is_not_json(
    local_runtime: RuntimeProcess,
) -> None:
    client = lambda_client(local_runtime)

    with pytest.raises(client.exceptions.InvalidRequestContentException):
        client.invoke(FunctionName="AuthorizerFunction", Payload=b"{not json")


# --------------------------------------------------------------------------- the terminal


def banner_lines(runtime: RuntimeProcess) -> list[str]:
    ready = runtime.stdout_lines.index("Ready.")
    return runtime.stdout_lines[: ready + 1]


def test_the_banner_gives_urls_tokens_and_a_walkthrough(local_runtime: RuntimeProcess) -> None:
    banner = "\n".join(banner_lines(local_runtime))

    assert local_runtime.base_url in banner
    assert local_runtime.lambda_url in banner
    assert DEV_TOKEN in banner
    assert "other" in banner
    assert OTHER_TOKEN not in banner  # only the dev token is printed
    assert f"export TOKEN={DEV_TOKEN}" in banner
    assert '"externalRef"' in banner
    assert banner.count("/v1/capabilities/cap-generative/predict") == 2
    assert "/v1/sessions/$SESSION/messages" in banner
    assert "/v1/sessions/$SESSION/context" in banner
    assert banner.splitlines()[-1] == "Ready."


def test_the_walkthrough_runs_as_printed(local_runtime: RuntimeProcess) -> None:
    lines = banner_lines(local_runtime)
    start = next(i for i, line in enumerate(lines) if line.startswith("Try it")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("Ctrl-C"))
    script = textwrap.dedent("\n".join(lines[start:end]))

    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    first, second, messages, context = outputs[:4]
    assert first["turn"] == {"userSeq": 1, "assistantSeq": 2}
    assert second["turn"] == {"userSeq": 3, "assistantSeq": 4}
    assert "What is my name?" in second["output"]
    assert [m["seq"] for m in messages["messages"]] == [1, 2, 3, 4]
    assert [m["seq"] for m in context["messages"]] == [1, 2, 3, 4]


def test_requests_do_not_flood_the_terminal(local_runtime: RuntimeProcess) -> None:
    time.sleep(0.3)
    before = len(local_runtime.stdout_lines) + len(local_runtime.stderr_lines)

    for _ in range(15):
        local_runtime.call("GET", "/v1/no-such-route")
        local_runtime.call("GET", "/v1/capabilities")  # 401 from the gateway
        # reaches DynamoDB through moto
        status, _, _ = local_runtime.call("GET", "/v1/capabilities", token=DEV_TOKEN)
        assert status == 200
    time.sleep(0.5)

    after = len(local_runtime.stdout_lines) + len(local_runtime.stderr_lines)
    new = (local_runtime.stdout_lines + local_runtime.stderr_lines)[before:]
    assert after - before <= 2, "\n".join(new)


# --------------------------------------------------------------------------- lifecycle


def test_sigterm_stops_the_runtime_cleanly(start_runtime: StartRuntime) -> None:
    runtime = start_runtime()

    runtime.assert_stopped_cleanly(signal.SIGTERM)

    assert runtime.stderr_lines[-1].endswith("stopped")
    assert "Traceback" not in runtime.stderr


def run_to_exit(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CONVO_")}
    full_env.pop("AWS_ENDPOINT_URL", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "local_runtime"],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_malformed_convo_dev_tokens_is_a_clear_error() -> None:
    done = run_to_exit({"CONVO_DEV_TOKENS": "acme", "PORT": str(free_port())})

    assert done.returncode == 2
    assert "CONVO_DEV_TOKENS" in done.stderr
    assert "name=token" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_a_clear_error(local_runtime: RuntimeProcess) -> None:
    busy = local_runtime.base_url.rsplit(":", 1)[1]

    done = run_to_exit({"PORT": busy, "LAMBDA_PORT": str(free_port())})

    assert done.returncode == 1
    assert f"127.0.0.1:{busy}" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- test stack
#
# template.yaml plus a few functions of the test's own, so that the gateway, the Lambda
# API and the queue pollers can be checked against known handlers.

TEST_FUNCTIONS = """
import base64
import json
import os
import pathlib
import time
import uuid

RECORDS = pathlib.Path(os.environ["E2E_RECORD_DIR"])


def _record(name, item):
    with (RECORDS / name).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(item) + "\\n")


def echo(event, context):
    return {
        "statusCode": 200,
        "headers": {"content-type": "application/json", "x-function": context.function_name},
        "cookies": ["a=1; Path=/", "b=2"],
        "body": json.dumps({
            "event": event,
            "memory": context.memory_limit_in_mb,
            "arn": context.invoked_function_arn,
            "remaining": context.get_remaining_time_in_millis(),
        }),
    }


def plain(event, context):
    return {"hello": "world"}


def binary(event, context):
    return {
        "statusCode": 201,
        "headers": {"content-type": "application/octet-stream"},
        "isBase64Encoded": True,
        "body": base64.b64encode(bytes(range(256))).decode(),
    }


INSTANCE = uuid.uuid4().hex  # one per execution environment (module instance)


def slow(event, context):
    time.sleep(0.6)
    return {"instance": INSTANCE, "n": event["queryStringParameters"]["n"]}


def boom(event, context):
    raise RuntimeError("boom from the test function")


def authorize(event, context):
    _record("authorizer.jsonl", event)
    token = event["identitySource"][0]
    return {"isAuthorized": not token.endswith("deny"), "context": {"workspaceId": "ws-e2e"}}


def consume(event, context):
    failures = []
    for record in event["Records"]:
        _record("consumer.jsonl", record)
        if record["body"] == "raise":
            raise RuntimeError("the whole batch fails")
        if record["body"].startswith("fail"):
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
"""


def _http_event(method: str, path: str, auth: str | None = "CountingAuthorizer") -> dict[str, Any]:
    props: dict[str, Any] = {"ApiId": {"Ref": "HttpApi"}, "Method": method, "Path": path}
    if auth is not None:
        props["Auth"] = {"Authorizer": auth}
    return {"Type": "HttpApi", "Properties": props}


def write_test_template(directory: Path) -> Path:
    template = load_template(REPO / "template.yaml")
    resources = template["Resources"]
    for resource in resources.values():
        props = resource.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = str((REPO / props[key]).resolve())
    (directory / "fns").mkdir()
    (directory / "fns" / "app.py").write_text(TEST_FUNCTIONS, encoding="utf-8")
    code = str(directory / "fns")

    def function(handler: str, events: dict[str, Any], timeout: int = 10) -> dict[str, Any]:
        return {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "CodeUri": code,
                "Handler": handler,
                "Timeout": timeout,
                "MemorySize": 256,
                "Events": events,
            },
        }

    resources["HttpApi"]["Properties"]["Auth"]["Authorizers"]["CountingAuthorizer"] = {
        "FunctionArn": {"Fn::GetAtt": ["CountingAuthorizerFunction", "Arn"]},
        "AuthorizerPayloadFormatVersion": "2.0",
        "EnableSimpleResponses": True,
        "Identity": {"Headers": ["Authorization"], "ReauthorizeEvery": 300},
    }
    resources["CountingAuthorizerFunction"] = function("app.authorize", {})
    resources["EchoFunction"] = function(
        "app.echo",
        {
            "Echo": _http_event("GET", "/test/echo/{thing}"),
            "EchoPost": _http_event("POST", "/test/echo/{thing}"),
            "EchoGreedy": _http_event("ANY", "/test/files/{path+}"),
        },
    )
    resources["PlainFunction"] = function(
        "app.plain",
        {
            "Plain": _http_event("GET", "/test/echo/plain"),
            "Public": _http_event("GET", "/test/public", "NONE"),
        },
    )
    resources["BinaryFunction"] = function(
        "app.binary", {"Binary": _http_event("GET", "/test/binary")}
    )
    resources["SlowFunction"] = function("app.slow", {"Slow": _http_event("GET", "/test/slow")})
    resources["BoomFunction"] = function("app.boom", {"Boom": _http_event("GET", "/test/boom")})
    resources["TestDLQ"] = {"Type": "AWS::SQS::Queue", "Properties": {}}
    resources["TestQueue"] = {
        "Type": "AWS::SQS::Queue",
        "Properties": {
            "VisibilityTimeout": 600,
            "RedrivePolicy": {
                "deadLetterTargetArn": {"Fn::GetAtt": ["TestDLQ", "Arn"]},
                "maxReceiveCount": 2,
            },
        },
    }
    resources["ConsumerFunction"] = function(
        "app.consume",
        {
            "Jobs": {
                "Type": "SQS",
                "Properties": {
                    "Queue": {"Fn::GetAtt": ["TestQueue", "Arn"]},
                    "BatchSize": 10,
                    "FunctionResponseTypes": ["ReportBatchItemFailures"],
                },
            }
        },
    )
    path = directory / "template.yaml"
    path.write_text(yaml.safe_dump(template, sort_keys=False), encoding="utf-8")
    return path


def start_test_stack(directory: Path, extra: dict[str, str] | None = None) -> RuntimeProcess:
    records = directory / "records"
    records.mkdir(exist_ok=True)
    env = {
        "LOCAL_TEMPLATE": str(write_test_template(directory)),
        "E2E_RECORD_DIR": str(records),
        "LOCAL_QUEUE_VISIBILITY_SECONDS": "1",
    }
    env.update(extra or {})
    return launch_runtime(env)


def records(directory: Path, name: str) -> list[dict[str, Any]]:
    path = directory / "records" / name
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="module")
def test_stack(stack_dir: Path) -> Iterator[RuntimeProcess]:
    runtime = start_test_stack(stack_dir)
    try:
        yield runtime
    finally:
        runtime.assert_stopped_cleanly()


def test_the_handler_gets_an_http_api_v2_event(test_stack: RuntimeProcess) -> None:
    status, headers, body = test_stack.call(
        "GET",
        "/test/echo/a%20b?x=1&x=2&y=",
        token="echo-token",
        headers={"X-Custom": "yes", "Cookie": "c1=v1; c2=v2"},
    )

    assert status == 200
    assert headers["x-function"] == "EchoFunction"
    event = body["event"]
    assert event["version"] == "2.0"
    assert event["routeKey"] == "GET /test/echo/{thing}"
    assert event["rawPath"] == "/test/echo/a%20b"
    assert event["rawQueryString"] == "x=1&x=2&y="
    assert event["queryStringParameters"] == {"x": "1,2", "y": ""}
    assert event["pathParameters"] == {"thing": "a b"}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert event["headers"]["x-custom"] == "yes"
    assert event["headers"]["authorization"] == "Bearer echo-token"
    context = event["requestContext"]
    assert context["authorizer"] == {"lambda": {"workspaceId": "ws-e2e"}}
    assert context["http"]["method"] == "GET"
    assert context["stage"] == "$default"
    assert context["routeKey"] == "GET /test/echo/{thing}"
    assert headers["apigw-requestid"] == context["requestId"]
    assert "body" not in event
    assert body["memory"] == 256
    assert body["arn"].endswith(":function:EchoFunction")
    assert 0 < body["remaining"] <= 10_000


def test_a_binary_body_reaches_the_handler_base64_encoded(test_stack: RuntimeProcess) -> None:
    status, _, body = test_stack.call(
        "POST", "/test/echo/bin", token="echo-token", raw_body=b"\xff\x00\xfe"
    )

    assert status == 200
    assert body["event"]["isBase64Encoded"] is True
    assert body["event"]["body"] == "/wD+"


def test_a_literal_route_beats_a_parameter_and_greedy_paths_match(
    test_stack: RuntimeProcess,
) -> None:
    _, _, plain = test_stack.call("GET", "/test/echo/plain", token="echo-token")
    _, _, greedy = test_stack.call("DELETE", "/test/files/a/b/c.txt", token="echo-token")

    assert plain == {"hello": "world"}
    assert greedy["event"]["pathParameters"] == {"path": "a/b/c.txt"}
    assert greedy["event"]["routeKey"] == "ANY /test/files/{path+}"


def raw_get(runtime: RuntimeProcess, path: str, token: str) -> tuple[Any, bytes]:
    request = urllib.request.Request(
        runtime.base_url + path, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers, response.read()


def test_responses_are_translated_like_api_gateway(test_stack: RuntimeProcess) -> None:
    echo_headers, _ = raw_get(test_stack, "/test/echo/x", "echo-token")
    status, headers, _ = test_stack.call("GET", "/test/binary", token="echo-token")
    _, binary = raw_get(test_stack, "/test/binary", "echo-token")

    assert echo_headers.get_all("set-cookie") == ["a=1; Path=/", "b=2"]
    assert status == 201
    assert headers["content-type"] == "application/octet-stream"
    assert binary == bytes(range(256))


def test_concurrent_requests_run_in_environments_of_their_own(
    test_stack: RuntimeProcess,
) -> None:
    def call(n: int) -> Any:
        status, _, body = test_stack.call("GET", f"/test/slow?n={n}", token="echo-token")
        assert status == 200
        return body

    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        bodies = list(pool.map(call, range(3)))
    elapsed = time.monotonic() - started
    warm = call(9)

    assert [body["n"] for body in bodies] == ["0", "1", "2"]
    assert len({body["instance"] for body in bodies}) == 3
    assert elapsed < 1.5  # not one after the other
    assert warm["instance"] in {body["instance"] for body in bodies}


def test_a_route_without_an_authorizer_needs_no_token(test_stack: RuntimeProcess) -> None:
    status, _, body = test_stack.call("GET", "/test/public")

    assert status == 200
    assert body == {"hello": "world"}


def test_the_authorizer_runs_once_per_token_within_its_ttl(
    test_stack: RuntimeProcess, stack_dir: Path
) -> None:
    before = len(records(stack_dir, "authorizer.jsonl"))

    for _ in range(3):
        assert test_stack.call("GET", "/test/echo/1", token="cached-token")[0] == 200

    calls = records(stack_dir, "authorizer.jsonl")[before:]
    assert len(calls) == 1
    assert calls[0]["type"] == "REQUEST"
    assert calls[0]["identitySource"] == ["Bearer cached-token"]
    assert calls[0]["routeArn"].endswith("/$default/GET/test/echo/1")
    assert calls[0]["headers"]["authorization"] == "Bearer cached-token"


def test_an_authorizer_denial_is_401_in_the_contracts_shape(test_stack: RuntimeProcess) -> None:
    status, _, body = test_stack.call("GET", "/test/echo/1", token="please-deny")

    assert status == 401
    assert body["error"]["code"] == "unauthorized" and body["error"]["message"]


def test_a_handler_that_raises_is_a_500_with_its_traceback_on_stderr(
    test_stack: RuntimeProcess,
) -> None:
    status, headers, body = test_stack.call("GET", "/test/boom", token="echo-token")

    assert status == 500
    assert body["error"]["code"] == "internal"
    # The request id in the body is the one the traceback was reported under.
    request_id = body["error"]["requestId"]
    assert request_id == headers["apigw-requestid"]
    wait_for(lambda: "boom from the test function" in test_stack.stderr, 5, "traceback")
    assert "Traceback" in test_stack.stderr
    assert f"requestId {request_id}" in test_stack.stderr


def test_the_lambda_api_reports_an_unhandled_error(test_stack: RuntimeProcess) -> None:
    response, payload = invoke(test_stack, "BoomFunction", {"any": "event"})

    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "RuntimeError"
    assert payload["errorMessage"] == "boom from the test function"
    assert isinstance(payload["stackTrace"], list)


def test_the_lambda_api_returns_a_plain_result(test_stack: RuntimeProcess) -> None:
    _, payload = invoke(test_stack, "PlainFunction", {})

    assert payload == {"hello": "world"}


def test_queue_messages_are_consumed_and_failures_go_to_the_dlq(
    test_stack: RuntimeProcess, stack_dir: Path
) -> None:
    sqs = boto3.client(
        "sqs",
        endpoint_url=test_stack.aws_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    queue = sqs.get_queue_url(QueueName="convo-local-TestQueue")["QueueUrl"]
    dlq = sqs.get_queue_url(QueueName="convo-local-TestDLQ")["QueueUrl"]
    sqs.send_message(
        QueueUrl=queue,
        MessageBody="ok-1",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "demo"}},
    )
    sqs.send_message(QueueUrl=queue, MessageBody="fail-1")

    def dead_letters() -> list[str]:
        got = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1).get("Messages") or []
        return [message["Body"] for message in got]

    assert wait_for(dead_letters, 20, "fail-1 in the DLQ") == ["fail-1"]
    seen = records(stack_dir, "consumer.jsonl")
    bodies = [record["body"] for record in seen]
    assert bodies.count("ok-1") == 1
    assert bodies.count("fail-1") == 2  # maxReceiveCount
    ok = next(record for record in seen if record["body"] == "ok-1")
    assert ok["eventSource"] == "aws:sqs"
    assert ok["eventSourceARN"].endswith(":convo-local-TestQueue")
    assert ok["attributes"]["ApproximateReceiveCount"] == "1"
    assert "SentTimestamp" in ok["attributes"]
    assert ok["messageAttributes"]["kind"]["stringValue"] == "demo"
    assert ok["md5OfBody"]
    assert ok["awsRegion"] == "us-east-1"


def test_the_authorizer_cache_can_be_turned_off(tmp_path: Path) -> None:
    runtime = start_test_stack(tmp_path, {"LOCAL_AUTHORIZER_CACHE_SECONDS": "0"})
    try:
        for _ in range(3):
            assert runtime.call("GET", "/test/echo/1", token="uncached-token")[0] == 200
    finally:
        runtime.assert_stopped_cleanly()

    assert len(records(tmp_path, "authorizer.jsonl")) == 3
