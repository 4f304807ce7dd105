"""The local gateway's and the stream app's own refusals over sockets on 127.0.0.1:0:
the contract's shape, never HTML or a bare ``{"message"}``; and stalled clients are cut
off. Both servers run in this process, over fake functions (no runtime process)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from convo_memory.doors.stream import StreamDoor, StreamRequestHandler
from tests.support.local_gateway import FakeRegistry, assert_contract_error, gateway

pytestmark = pytest.mark.e2e


@pytest.fixture
def served() -> Iterator[tuple[str, int]]:
    """The gateway on a free port, cutting off clients after half a second."""
    server = gateway(FakeRegistry(Open=lambda event: {"ok": True}), timeout=0.5)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield str(server.server_address[0]), server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def stream_app() -> Iterator[tuple[str, int]]:
    """The streaming door's own HTTP server (as behind the Web Adapter), same timeout."""

    class Handler(StreamRequestHandler):
        timeout = 0.5

    Handler.door = StreamDoor(lambda: pytest.fail("the door must refuse before any store call"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield str(server.server_address[0]), server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def exchange(address: tuple[str, int], raw: bytes) -> tuple[int, bytes]:
    """Send raw bytes, read until the server closes; (status, body)."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    head, _, body = response.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    return int(head.split()[1]), body


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2 :]
    return out


def stalled_is_closed(address: tuple[str, int], partial: bytes) -> bytes:
    """Send part of a request and wait (bounded) for the server to hang up: what it sent."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(partial)
        received = b""
        while chunk := sock.recv(65536):  # b"" once the server closes; a hang times out
            received += chunk
        return received


REFUSALS = [
    pytest.param(b"GARBAGE\r\n\r\n", 400, "invalid_json", id="malformed request line"),
    pytest.param(b"GET / HTTP/9.9\r\n\r\n", 400, "invalid_json", id="unsupported version"),
    pytest.param(
        b"POST /open HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
        400,
        "invalid_json",
        id="malformed Content-Length",
    ),
    pytest.param(
        b"POST /open HTTP/1.1\r\nContent-Length: -4\r\n\r\n",
        400,
        "invalid_json",
        id="negative Content-Length",
    ),
    pytest.param(
        b"GET /x HTTP/1.1\r\nX-Big: " + b"h" * 70_000 + b"\r\n\r\n",
        413,
        "payload_too_large",
        id="header line too long",
    ),
    pytest.param(
        b"GET /" + b"p" * 70_000 + b" HTTP/1.1\r\n\r\n", 413, "payload_too_large", id="URI too long"
    ),
]


@pytest.mark.parametrize(("raw", "status", "code"), REFUSALS)
def test_the_gateways_own_refusals_are_contract_json_never_html(
    served: tuple[str, int], raw: bytes, status: int, code: str
) -> None:
    got, body = exchange(served, raw)

    assert b"<html" not in body.lower() and b"<!doctype" not in body.lower()
    assert_contract_error(got, body, status, code)


@pytest.mark.parametrize(("raw", "status", "code"), REFUSALS)
def test_the_stream_apps_own_refusals_are_contract_json_never_html(
    stream_app: tuple[str, int], raw: bytes, status: int, code: str
) -> None:
    got, body = exchange(stream_app, raw.replace(b"/open", b"/v1/capabilities/c/predict/stream"))

    assert b"<html" not in body.lower()
    assert_contract_error(got, body, status, code)


def test_the_gateways_body_refusals_are_contract_json(served: tuple[str, int]) -> None:
    too_large = b"POST /open HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"
    bad_chunks = b"POST /open HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"

    assert_contract_error(*exchange(served, too_large), 413, "payload_too_large")
    assert_contract_error(*exchange(served, bad_chunks), 400, "invalid_json")


def test_an_unknown_method_is_routed_to_the_contracts_404(served: tuple[str, int]) -> None:
    status, body = exchange(served, b"BREW /open HTTP/1.1\r\nConnection: close\r\n\r\n")

    assert_contract_error(status, body, 404, "not_found")


@pytest.mark.parametrize(
    "partial",
    [
        pytest.param(b"GET /op", id="half a request line"),
        pytest.param(b"GET /open HTTP/1.1\r\nHost: x", id="half the headers"),
        pytest.param(b"POST /open HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", id="half the body"),
        pytest.param(
            b"POST /open HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n{",
            id="half a chunk",
        ),
    ],
)
def test_a_stalled_client_is_cut_off_by_the_gateway(
    served: tuple[str, int], partial: bytes
) -> None:
    assert stalled_is_closed(served, partial) == b""


@pytest.mark.parametrize(
    "partial",
    [
        pytest.param(b"POST /v1/capabilities/c/predict/st", id="half a request line"),
        pytest.param(
            b"POST /v1/capabilities/c/predict/stream HTTP/1.1\r\nContent-Length: 50\r\n\r\n{",
            id="half the body",
        ),
    ],
)
def test_a_stalled_client_is_cut_off_by_the_stream_app(
    stream_app: tuple[str, int], partial: bytes
) -> None:
    assert stalled_is_closed(stream_app, partial) == b""


def test_a_keep_alive_connection_still_serves_requests_before_the_timeout(
    served: tuple[str, int],
) -> None:
    import http.client

    connection = http.client.HTTPConnection(*served, timeout=10)
    try:
        for _ in range(3):
            connection.request("GET", "/open")
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read()) == {"ok": True}
    finally:
        connection.close()


STREAM_LINE = b"POST /v1/capabilities/c/predict/stream HTTP/1.1\r\n"


@pytest.mark.parametrize("line_break", [b"\n", b"\r"], ids=["bare LF", "bare CR"])
def test_a_bare_line_break_in_a_header_value_is_refused_by_both_servers(
    served: tuple[str, int], stream_app: tuple[str, int], line_break: bytes
) -> None:
    # Split there, "Content-Length: 0" would be a header of its own.
    headers = b"X-A: a" + line_break + b"Content-Length: 0\r\nConnection: close\r\n\r\n"

    for address, line in ((served, b"GET /open HTTP/1.1\r\n"), (stream_app, STREAM_LINE)):
        status, body = exchange(address, line + headers)
        parsed = assert_contract_error(status, body, 400, "invalid_json")
        assert "bare CR or LF" in parsed["error"]["message"]


def test_the_gateway_reads_a_chunked_body_and_refuses_a_negative_chunk_size(
    served: tuple[str, int],
) -> None:
    chunked = b"GET /open HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"

    status, body = exchange(served, chunked + b"2;ext=1\r\n{}\r\n0\r\nX-Trailer: t\r\n\r\n")
    negative = exchange(served, chunked + b"-1\r\n")  # was read as "everything until EOF"

    assert status == 200 and json.loads(body) == {"ok": True}
    assert_contract_error(*negative, 400, "invalid_json")


def test_the_stream_app_refuses_a_chunked_body_over_the_limit_before_reading_it(
    stream_app: tuple[str, int],
) -> None:
    # (v5) What Lambda carries (6 MiB): a body may carry attachments up to it.
    too_large = STREAM_LINE + b"Transfer-Encoding: chunked\r\n\r\n600001\r\n"  # 6 MiB + 1

    status, body = exchange(stream_app, too_large)

    parsed = assert_contract_error(status, body, 413, "payload_too_large")
    assert parsed["error"]["message"] == "the request body is larger than 6291456 bytes"
