"""HTTP/1.1 request framing for the servers that speak HTTP themselves: the streaming
door's server (behind the Lambda Web Adapter) and the local runtime's ports.

``StrictRequestHandler`` refuses a header line holding a bare CR or LF (one request
must never be read as two, nor a header smuggled into another), sends no ``Server``
header, keeps a client that hangs up from printing a traceback, and reads request bodies
framed by ``Content-Length`` or ``Transfer-Encoding: chunked`` within a byte limit.
Subclasses answer ``send_error`` in the contract's shape. Pure: the standard library only.
"""

from __future__ import annotations

import contextlib
import re
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import Any

MAX_CHUNK_LINE_BYTES = 1024
MAX_TRAILER_LINES = 32
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,20}")


class MalformedBody(ValueError):
    """The body's framing cannot be read (a 400)."""


class RequestBodyTooLarge(ValueError):
    """The body is longer than the limit (a 413); nothing past the limit was read."""


class _HeaderLineRecorder:
    """Passes ``readline`` through and notes a header line broken by a bare CR or LF."""

    def __init__(self, stream: BufferedIOBase) -> None:
        self.stream = stream
        self.bare_line_break = False

    def readline(self, size: int = -1) -> bytes:
        line = self.stream.readline(size)
        if line.endswith(b"\n"):
            content = line[:-2] if line.endswith(b"\r\n") else None
            if content is None or b"\r" in content:
                self.bare_line_break = True
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class StrictRequestHandler(BaseHTTPRequestHandler):
    """A ``BaseHTTPRequestHandler`` that reads requests strictly (see the module)."""

    protocol_version = "HTTP/1.1"

    def parse_request(self) -> bool:
        # The stdlib splits header lines at a bare LF and its header parser at a bare
        # CR: "X-A: a\rContent-Length: 9" would become two headers. Refuse instead.
        recorder = _HeaderLineRecorder(self.rfile)
        self.rfile = recorder  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = recorder.stream
        if parsed and recorder.bare_line_break:
            self.send_error(400, "a header line holds a bare CR or LF")
            return False
        return parsed

    def send_response(self, code: int, message: str | None = None) -> None:
        # The stdlib's, without its ``Server: BaseHTTP/x Python/y`` header.
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", formatdate(usegmt=True))

    def finish(self) -> None:
        with contextlib.suppress(ConnectionError):  # the client hung up before the flush
            super().finish()

    def handle(self) -> None:
        try:
            super().handle()
        except ConnectionError:  # the client hung up mid-response: nothing left to say
            self.close_connection = True

    def read_body(self, max_bytes: int) -> bytes:
        """The request body by ``Transfer-Encoding: chunked`` or ``Content-Length``.

        ``MalformedBody`` or ``RequestBodyTooLarge`` when it cannot be taken; the connection is
        then closed after the answer, since the rest of the body was not read."""
        try:
            return self._read_body(max_bytes)
        except (MalformedBody, RequestBodyTooLarge):
            self.close_connection = True
            raise

    def _read_body(self, max_bytes: int) -> bytes:
        codings = [
            coding.strip().lower()
            for value in self.headers.get_all("Transfer-Encoding") or []
            for coding in value.split(",")
            if coding.strip()
        ]
        if codings:
            if codings != ["chunked"]:
                raise MalformedBody("the only Transfer-Encoding taken is chunked")
            if self.headers.get("Content-Length") is not None:
                # Both framings: chunked wins (RFC 9112), and the connection ends after.
                self.close_connection = True
            return read_chunked(self.rfile, max_bytes)
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if not lengths:
            return b""
        if len(lengths) > 1 or not _CONTENT_LENGTH.fullmatch(next(iter(lengths))):
            raise MalformedBody("malformed Content-Length")
        length = int(next(iter(lengths)))
        if length > max_bytes:
            raise RequestBodyTooLarge(f"the request body is larger than {max_bytes} bytes")
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            raise MalformedBody("the request body ended before its Content-Length")
        return body


def read_chunked(stream: BufferedIOBase, max_bytes: int) -> bytes:
    """A chunked request body (trailers read and dropped); ``RequestBodyTooLarge`` as soon as
    the announced chunk sizes pass ``max_bytes``, before their data is read."""
    parts: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(MAX_CHUNK_LINE_BYTES + 1)
        if not line.endswith(b"\n"):
            raise MalformedBody("malformed chunked transfer encoding")
        size_text = line.split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise MalformedBody("malformed chunked transfer encoding")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > max_bytes:
            raise RequestBodyTooLarge(f"the request body is larger than {max_bytes} bytes")
        data = stream.read(size)
        if len(data) != size or stream.read(2) != b"\r\n":
            raise MalformedBody("malformed chunked transfer encoding")
        parts.append(data)
    for _ in range(MAX_TRAILER_LINES):
        line = stream.readline(MAX_CHUNK_LINE_BYTES + 1)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if not line.endswith(b"\n"):
            break
    raise MalformedBody("malformed chunked transfer encoding")
