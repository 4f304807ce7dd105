"""Server-Sent Events framing for the streaming door."""

from __future__ import annotations

import json
from typing import Any


def sse_event(name: str, data: Any) -> str:
    """One SSE event; data is JSON on a single line (so it cannot inject events)."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return f"event: {name}\ndata: {payload}\n\n"


def write_chunked(handler: Any, status: int, headers: Any, chunks: Any) -> None:
    """Write a response with chunked transfer encoding, flushing every chunk, on a
    ``http.server.BaseHTTPRequestHandler``: how a streamed response reaches the client
    (the Function URL's Web Adapter on AWS, the local runtime's gateway)."""
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for chunk in chunks:
        if chunk:
            handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()
