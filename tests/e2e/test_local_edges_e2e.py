"""The local runtime at its edges, as AWS behaves there (issue 16, items 5 and 6).

Port 3000 (the HttpApi and the Function URL): actual responses carry the CORS header the
template's CorsConfiguration and the Function URL's Cors add; a header line with a bare
CR or LF is a 400 in the contract's shape, never a second request nor a traceback.

The streaming door's own server (``functions/stream/app.py``, what the Lambda Web Adapter
runs on AWS), started here over the shared runtime's moto: it takes chunked bodies within
the body limit, answers 413 with the other doors' message, and sends no ``Server`` header.

Port 3001 (the Lambda Invoke API): refuses what a web page could send, 403.

Malformed requests go over raw sockets: no HTTP client would send them.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from local_runtime.aws_resources import ensure_resources
from tests.support.runtime_process import DEV_TOKEN, REPO, RuntimeProcess, free_port, http_call

pytestmark = pytest.mark.e2e

EVENTS = REPO / "events"
PAGE_ORIGIN = "https://page.example"
BODY_LIMIT = 1024 * 1024  # input_gate.MAX_BODY_BYTES: the service's own body limit
# (v5) What Lambda takes (input_gate.MAX_ATTACHMENT_BODY_BYTES): a body that carries
# attachments may be this large, so the streaming server reads up to it.
LAMBDA_LIMIT = 6 * 1024 * 1024
STREAM_PATH = "/v1/capabilities/cap-generative/predict/stream"
STREAM_SERVER_READY_SECONDS = 30.0


# --------------------------------------------------------------------------- raw HTTP


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    responses: int  # status lines in everything the server sent

    def header(self, name: str) -> str | None:
        found = [value for key, value in self.headers if key.lower() == name.lower()]
        return found[0] if found else None

    def json(self) -> Any:
        return json.loads(self.body)


def address_of(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def exchange(address: tuple[str, int], raw: bytes, timeout: float = 20) -> RawResponse:
    """Send raw bytes and read until the server closes the connection."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(raw)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            if not received:
                raise
    return parse_response(received)


def parse_response(received: bytes) -> RawResponse:
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [
        (name.strip(), value.strip())
        for name, _, value in (line.partition(":") for line in lines[1:])
    ]
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        body = dechunk(body)
    return RawResponse(int(lines[0].split()[1]), headers, body, received.count(b"HTTP/1.1 "))


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2 :]
    return out


def chunked(payload: bytes, pieces: int = 3) -> bytes:
    step = max(1, len(payload) // pieces)
    parts = [payload[i : i + step] for i in range(0, len(payload), step)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def request_bytes(
    method: str, path: str, headers: Sequence[tuple[str, str]], body: bytes = b""
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode("latin-1") + b"\r\n" + body


def assert_contract_error(response: RawResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, response
    assert (response.header("content-type") or "").startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code and body["error"]["message"], body
    return body


def tracebacks(lines: Sequence[str]) -> int:
    return sum("Traceback" in line for line in lines)


# --------------------------------------------------------------------------- item 5: CORS


def cors_cases(runtime: RuntimeProcess) -> list[tuple[str, str, str | None, Any, int]]:
    """(method, path, token, json body, expected status): one of each kind of answer."""
    return [
        ("GET", "/v1/capabilities", DEV_TOKEN, None, 200),
        ("POST", "/v1/capabilities/cap-generative/predict", DEV_TOKEN, {"input": "Hi"}, 200),
        ("POST", STREAM_PATH, DEV_TOKEN, {"input": "Hi"}, 200),  # the Function URL's route
        ("GET", "/v1/capabilities", None, None, 401),
        ("GET", "/v1/no-such-route", DEV_TOKEN, None, 404),
        ("POST", "/v1/capabilities/cap-generative/predict", DEV_TOKEN, {"input": ""}, 422),
    ]


def test_actual_responses_carry_the_cors_header_a_page_on_another_origin_needs(
    local_runtime: RuntimeProcess,
) -> None:
    for method, path, token, body, expected in cors_cases(local_runtime):
        status, headers, _ = local_runtime.call(
            method, path, token=token, json=body, headers={"Origin": PAGE_ORIGIN}
        )

        assert status == expected, (method, path)
        # The template's AllowOrigins default is "*": what API Gateway and the URL send.
        assert headers.get("access-control-allow-origin") == "*", (method, path, headers)


def test_a_response_to_a_request_without_an_origin_carries_no_cors_header(
    local_runtime: RuntimeProcess,
) -> None:
    for method, path, token, body, expected in cors_cases(local_runtime):
        status, headers, _ = local_runtime.call(method, path, token=token, json=body)

        assert status == expected, (method, path)
        assert not any(name.startswith("access-control-") for name in headers), headers


def test_a_preflight_still_gets_the_full_cors_answer(local_runtime: RuntimeProcess) -> None:
    status, headers, _ = local_runtime.call(
        "OPTIONS",
        "/v1/capabilities",
        headers={
            "Origin": PAGE_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )

    assert status == 204
    assert headers["access-control-allow-origin"] == "*"
    assert "POST" in headers["access-control-allow-methods"]


# ------------------------------------------------- item 5: bare CR / LF in a header value

BREAKS = [pytest.param(b"\n", id="bare LF"), pytest.param(b"\r", id="bare CR")]


def smuggling_request(method: str, path: str, line_break: bytes) -> bytes:
    """A header value broken by ``line_break`` so that, split there, the rest would read
    as another header: the dev token, which the request otherwise lacks. No body: the
    request is refused before one would be read."""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        + b"X-Note: harmless"
        + line_break
        + f"Authorization: Bearer {DEV_TOKEN}\r\n".encode()
        + b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    )


def assert_refused_for_the_line_break(response: RawResponse) -> None:
    body = assert_contract_error(response, 400, "invalid_json")
    # Split instead, the smuggled token would be honoured: 200 for the GET, and the input
    # gate's "must be a JSON object" for the empty POST.
    assert "header" in body["error"]["message"], body
    assert response.responses == 1  # one answer, then the connection closed


@pytest.mark.parametrize("line_break", BREAKS)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/capabilities"), ("POST", STREAM_PATH)],
    ids=["api", "stream"],
)
def test_a_bare_line_break_in_a_header_value_is_a_400_on_the_api_port(
    local_runtime: RuntimeProcess, method: str, path: str, line_break: bytes
) -> None:
    before = tracebacks(local_runtime.stderr_lines)

    response = exchange(
        address_of(local_runtime.base_url), smuggling_request(method, path, line_break)
    )

    assert_refused_for_the_line_break(response)
    time.sleep(0.3)
    assert tracebacks(local_runtime.stderr_lines) == before, local_runtime.stderr


# --------------------------------------------------------- item 5: the streaming server


@dataclass
class StreamServer:
    process: subprocess.Popen[str]
    address: tuple[str, int]
    stderr_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def stream_server_env(runtime: RuntimeProcess, port: int) -> dict[str, str]:
    """The StreamFunction's environment over the runtime's moto, as the template sets it."""
    credentials = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    resources = ensure_resources(session, endpoint_url=runtime.aws_endpoint)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONVO_"))}
    env.update(credentials)
    env.update(resources.env())
    for name in ("PROVIDER_SECRET_ARNS", "PROVIDER_PARAMETER_NAMES"):
        env.pop(name, None)  # IAM allow-lists: nothing to mirror locally
    env.update(
        {
            "AWS_ENDPOINT_URL": runtime.aws_endpoint,
            "PORT": str(port),
            "WORKSPACE_TURNS_PER_SECOND": "1000",
            "CURSOR_SIGNING_KEY": "e2e-" + "0" * 60,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture(scope="module")
def stream_server(
    local_runtime: RuntimeProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StreamServer]:
    """``python functions/stream/app.py`` (run.sh's command) on a free port."""
    port = free_port()
    stderr_path = tmp_path_factory.mktemp("stream") / "stderr.log"
    with stderr_path.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(REPO / "functions" / "stream" / "app.py")],
            cwd=REPO,
            env=stream_server_env(local_runtime, port),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    server = StreamServer(process, ("127.0.0.1", port), stderr_path)
    try:
        deadline = time.monotonic() + STREAM_SERVER_READY_SECONDS
        while True:
            try:
                socket.create_connection(server.address, timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the streaming server did not start:\n{server.stderr}")
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def stream_request(body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    return request_bytes(
        "POST",
        STREAM_PATH,
        [
            ("Host", "127.0.0.1"),
            ("Authorization", f"Bearer {DEV_TOKEN}"),
            ("Content-Type", "application/json"),
            ("Connection", "close"),
            *headers,
        ],
        body,
    )


def sse_events(body: bytes) -> list[str]:
    return [
        line.removeprefix("event: ")
        for line in body.decode().splitlines()
        if line.startswith("event: ")
    ]


def test_the_streaming_server_takes_a_chunked_body(stream_server: StreamServer) -> None:
    payload = json.dumps({"input": "Hello over a chunked body"}).encode()

    response = exchange(
        stream_server.address,
        stream_request(chunked(payload), [("Transfer-Encoding", "chunked")]),
    )

    assert response.status == 200, response
    assert (response.header("content-type") or "").startswith("text/event-stream")
    assert sse_events(response.body)[-1] == "done"
    done = json.loads(response.body.decode().rsplit("data: ", 1)[1])
    assert "Hello over a chunked body" in done["output"]
    assert response.header("server") is None


def test_an_oversized_body_is_413_with_the_message_of_the_other_doors(
    local_runtime: RuntimeProcess, stream_server: StreamServer
) -> None:
    # The API port's predict (its function's input gate) on a body one byte too long: a
    # body without attachments keeps the service's own limit.
    def predict(body: bytes) -> tuple[int, Any]:
        status, _, answer = http_call(
            local_runtime.base_url + "/v1/capabilities/cap-generative/predict",
            "POST",
            token=DEV_TOKEN,
            raw_body=body,
            headers={"content-type": "application/json"},
        )
        return status, answer

    too_long = b'{"input": "' + b"a" * (BODY_LIMIT - 12) + b'"}'
    assert len(too_long) == BODY_LIMIT + 1
    status, api_body = predict(too_long)
    assert status == 413 and api_body["error"]["code"] == "payload_too_large"
    # Over what Lambda takes: refused on every door in the same words.
    status, api_body = predict(b'{"input": "' + b"a" * (LAMBDA_LIMIT - 12) + b'"}')
    assert status == 413 and api_body["error"]["code"] == "payload_too_large"

    # The streaming server refuses as soon as the announced sizes pass the limit, so
    # neither request needs to send its body.
    by_chunks = exchange(
        stream_server.address,
        stream_request(b"%x\r\n" % (LAMBDA_LIMIT + 1), [("Transfer-Encoding", "chunked")]),
    )
    by_chunks_in_pieces = exchange(
        stream_server.address,
        stream_request(
            b"%x\r\n%s\r\n%x\r\n" % (LAMBDA_LIMIT, b" " * LAMBDA_LIMIT, 1),
            [("Transfer-Encoding", "chunked")],
        ),
    )
    by_length = exchange(
        stream_server.address, stream_request(b"", [("Content-Length", str(LAMBDA_LIMIT + 1))])
    )

    for response in (by_chunks, by_chunks_in_pieces, by_length):
        body = assert_contract_error(response, 413, "payload_too_large")
        assert body["error"]["message"] == api_body["error"]["message"]
        assert response.header("server") is None


def test_a_chunked_body_within_the_limit_is_not_refused_for_its_size(
    stream_server: StreamServer,
) -> None:
    # Exactly the limit, in chunks: read whole, then judged by the input gate (not JSON).
    response = exchange(
        stream_server.address,
        stream_request(chunked(b"x" * BODY_LIMIT, 4), [("Transfer-Encoding", "chunked")]),
    )

    assert_contract_error(response, 400, "invalid_json")


# Each body stops where the server stops reading: it refuses there.
@pytest.mark.parametrize(
    ("framing", "body"),
    [
        pytest.param([("Transfer-Encoding", "chunked")], b"zz\r\n", id="bad size"),
        pytest.param([("Transfer-Encoding", "chunked")], b"-2\r\n", id="negative size"),
        pytest.param([("Transfer-Encoding", "chunked")], b"2\r\n{}XX", id="no CRLF after data"),
        pytest.param([("Transfer-Encoding", "gzip")], b"", id="unknown coding"),
        pytest.param([("Content-Length", "+2")], b"", id="signed length"),
    ],
)
def test_a_body_whose_framing_cannot_be_read_is_a_400(
    stream_server: StreamServer, framing: list[tuple[str, str]], body: bytes
) -> None:
    response = exchange(stream_server.address, stream_request(body, framing))

    assert_contract_error(response, 400, "invalid_json")
    assert response.responses == 1


def test_no_answer_of_the_streaming_server_names_its_software(
    stream_server: StreamServer,
) -> None:
    answers = [
        exchange(
            stream_server.address, stream_request(b'{"input": "Hi"}', [("Content-Length", "15")])
        ),
        exchange(stream_server.address, b"GARBAGE\r\n\r\n"),
        exchange(
            stream_server.address,
            request_bytes(
                "OPTIONS",
                STREAM_PATH,
                [
                    ("Host", "127.0.0.1"),
                    ("Origin", PAGE_ORIGIN),
                    ("Access-Control-Request-Method", "POST"),
                    ("Connection", "close"),
                ],
            ),
        ),
    ]

    assert [answer.status for answer in answers] == [200, 400, 204]
    for answer in answers:
        assert answer.header("server") is None, answer.headers
        assert answer.header("date")  # the stdlib's other default header is kept


@pytest.mark.parametrize("line_break", BREAKS)
def test_a_bare_line_break_in_a_header_value_is_a_400_on_the_streaming_server(
    stream_server: StreamServer, line_break: bytes
) -> None:
    response = exchange(stream_server.address, smuggling_request("POST", STREAM_PATH, line_break))

    assert_refused_for_the_line_break(response)
    assert response.header("server") is None
    assert "Traceback" not in stream_server.stderr


# --------------------------------------------------------------- item 6: the Lambda port


def invoke_raw(
    runtime: RuntimeProcess,
    function: str,
    event: Any,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> tuple[int, Any]:
    """One request to the Lambda port with exactly these headers (Host included)."""
    connection = http.client.HTTPConnection(*address_of(runtime.lambda_url), timeout=30)
    try:
        connection.request(
            method,
            f"/2015-03-31/functions/{function}/invocations",
            body=json.dumps(event).encode(),
            headers=headers or {},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def sample_event(name: str, workspace: str = "ws-dev") -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text(encoding="utf-8"))
    event["requestContext"]["authorizer"]["lambda"]["workspaceId"] = workspace
    return event


def capabilities_of(runtime: RuntimeProcess, workspace: str) -> list[Any]:
    status, result = invoke_raw(
        runtime, "CapabilitiesFunction", sample_event("list_capabilities.json", workspace)
    )
    assert status == 200 and result["statusCode"] == 200, result
    return list(json.loads(result["body"])["capabilities"])


@pytest.mark.parametrize("origin", [PAGE_ORIGIN, "null", "http://127.0.0.1:3000"])
def test_the_lambda_port_refuses_a_request_that_carries_an_origin(
    local_runtime: RuntimeProcess, origin: str
) -> None:
    invented = f"ws-invented-{abs(hash(origin)) % 10_000}"

    status, body = invoke_raw(
        local_runtime,
        "CapabilitiesFunction",
        sample_event("create_capability.json", invented),
        {"Origin": origin, "Content-Type": "text/plain"},  # what a page's fetch can send
    )

    assert status == 403
    assert body["error"]["code"] == "forbidden" and body["error"]["message"], body
    assert capabilities_of(local_runtime, invented) == []  # nothing was created


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example:{port}",
        "localhost.evil.example",
        "127.0.0.2:{port}",
        "localhost:{port}@evil.example",
    ],
)
def test_the_lambda_port_refuses_a_host_that_is_not_loopback(
    local_runtime: RuntimeProcess, host: str
) -> None:
    port = address_of(local_runtime.lambda_url)[1]
    invented = f"ws-rebound-{abs(hash(host)) % 10_000}"

    status, body = invoke_raw(
        local_runtime,
        "CapabilitiesFunction",
        sample_event("create_capability.json", invented),
        {"Host": host.format(port=port)},
    )

    assert status == 403
    assert body["error"]["code"] == "forbidden", body
    assert capabilities_of(local_runtime, invented) == []


def test_the_lambda_port_refuses_a_preflight(local_runtime: RuntimeProcess) -> None:
    status, body = invoke_raw(
        local_runtime,
        "CapabilitiesFunction",
        None,
        {"Origin": PAGE_ORIGIN, "Access-Control-Request-Method": "POST"},
        method="OPTIONS",
    )

    assert status == 403 and body["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:{port}", "localhost", "LocalHost:{port}", "[::1]:{port}"]
)
def test_the_lambda_port_serves_loopback_hosts(local_runtime: RuntimeProcess, host: str) -> None:
    port = address_of(local_runtime.lambda_url)[1]
    event = json.loads((EVENTS / "authorizer.json").read_text(encoding="utf-8"))
    event["headers"]["authorization"] = f"Bearer {DEV_TOKEN}"

    status, result = invoke_raw(
        local_runtime, "AuthorizerFunction", event, {"Host": host.format(port=port)}
    )

    assert status == 200
    assert result == {"isAuthorized": True, "context": {"workspaceId": "ws-dev"}}
