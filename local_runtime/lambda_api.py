"""The Lambda Invoke API on 127.0.0.1, the way ``sam local start-lambda`` serves it.

``POST /2015-03-31/functions/{FunctionName}/invocations`` with the event as the body;
FunctionName is the template's logical id (a function ARN ending in it works too).

It has no auth, like ``sam local start-lambda``, and invokes any function with any event
(an authorizer context naming any workspace included), so it refuses what a web page
could send: a request with an ``Origin`` header (a page's fetch or form), or one whose
``Host`` is not a loopback name (a page whose DNS name was rebound to 127.0.0.1): 403.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import traceback
import uuid
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from local_runtime.handlers import (
    FunctionRegistry,
    HandlerLoadError,
    TooManyRequestsError,
    function_arn,
)

_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/([^/]+)/invocations/?$")
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # synchronous invocation limit
# The names a request to 127.0.0.1 may carry as its Host, with or without a port.
_LOOPBACK_HOST = re.compile(r"^(?:127\.0\.0\.1|localhost|\[::1\])(?::[0-9]{1,5})?$", re.IGNORECASE)


def browser_refusal(headers: Message) -> str | None:
    """Why a request looks like it came from a web page (None: it does not)."""
    if headers.get("Origin") is not None:
        return "a request with an Origin header (from a web page) is refused"
    hosts = headers.get_all("Host") or []
    if len(hosts) != 1 or not _LOOPBACK_HOST.fullmatch(hosts[0].strip()):
        return "the Host must be 127.0.0.1, localhost or [::1]"
    return None


def function_name_of(raw: str) -> str:
    """``Name``, ``Name:qualifier`` or a function ARN -> ``Name``."""
    name = unquote(raw)
    if name.startswith("arn:"):
        parts = name.split(":")
        # arn:aws:lambda:region:account:function:Name[:qualifier]
        return parts[6] if len(parts) > 6 else name
    return name.split(":", 1)[0]


def error_payload(exc: BaseException) -> dict[str, Any]:
    """The body the Lambda runtime returns for an unhandled exception."""
    error_type = (
        "Runtime.ImportModuleError" if isinstance(exc, HandlerLoadError) else type(exc).__name__
    )
    return {
        "errorMessage": str(exc),
        "errorType": error_type,
        "requestId": "",
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


class LambdaApi(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # Lambda's queue for InvocationType=Event (retries, on-failure destination); set by
    # the runtime. Without one, an event runs once in a thread of its own.
    async_events: Any = None

    def __init__(
        self, address: tuple[str, int], registry: FunctionRegistry, access_log: bool = False
    ) -> None:
        self.registry = registry
        self.access_log = access_log
        super().__init__(address, _LambdaRequestHandler)


class _LambdaRequestHandler(BaseHTTPRequestHandler):
    server: LambdaApi
    protocol_version = "HTTP/1.1"
    server_version = "local-lambda"
    sys_version = ""

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        reason = browser_refusal(self.headers)
        if reason is None:
            return True
        self.close_connection = True
        self._discard_body()  # so that the client reads the 403, not a reset connection
        body = json.dumps({"error": {"code": "forbidden", "message": reason}})
        self._send(
            403,
            body.encode("utf-8"),
            str(uuid.uuid4()),
            [("x-amzn-ErrorType", "AccessDeniedException")],
        )
        return False

    def _discard_body(self) -> None:
        raw = self.headers.get("Content-Length") or ""
        if raw.isdigit() and int(raw) <= MAX_PAYLOAD_BYTES:
            self.rfile.read(int(raw))

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            self._error(400, "InvalidRequestContentException", "Bad Content-Length")
            return
        if length > MAX_PAYLOAD_BYTES:
            self.close_connection = True
            self._error(
                413, "RequestTooLargeException", "Request must be smaller than 6291456 bytes"
            )
            return
        payload = self.rfile.read(length) if length > 0 else b""
        found = _INVOKE_PATH.match(self.path.split("?", 1)[0])
        if found is None:
            self._error(404, "UnknownOperationException", f"Unknown operation {self.path}")
            return
        name = function_name_of(found.group(1))
        if name not in self.server.registry:
            self._error(
                404, "ResourceNotFoundException", f"Function not found: {function_arn(name)}"
            )
            return
        try:
            event = json.loads(payload) if payload.strip() else {}
        except ValueError:
            self._error(
                400,
                "InvalidRequestContentException",
                "Could not parse request body into json",
            )
            return
        request_id = str(uuid.uuid4())
        invocation_type = self.headers.get("X-Amz-Invocation-Type") or "RequestResponse"
        if invocation_type == "DryRun":
            self._send(204, b"", request_id)
            return
        if invocation_type == "Event":
            threading.Thread(
                target=self._invoke_async, args=(name, event, request_id), daemon=True
            ).start()
            self._send(202, b"", request_id)
            return
        try:
            result = self.server.registry.invoke(name, event, request_id)
            body = json.dumps(result).encode("utf-8")
        except TooManyRequestsError as exc:
            self._error(429, "TooManyRequestsException", str(exc))
            return
        except Exception as exc:
            print(
                f"[local_runtime] {name} raised:\n{traceback.format_exc()}",
                file=sys.stderr,
                flush=True,
            )
            error = error_payload(exc)
            error["requestId"] = request_id
            self._send(
                200,
                json.dumps(error).encode("utf-8"),
                request_id,
                [("X-Amz-Function-Error", "Unhandled")],
            )
            return
        self._send(200, body, request_id)

    def _invoke_async(self, name: str, event: Any, request_id: str) -> None:
        if self.server.async_events is not None:
            self.server.async_events.submit(name, event, request_id)
            return
        try:
            self.server.registry.invoke(name, event, request_id)
        except Exception:
            print(
                f"[local_runtime] {name} (async) raised:\n{traceback.format_exc()}",
                file=sys.stderr,
                flush=True,
            )

    def do_GET(self) -> None:
        self._error(404, "UnknownOperationException", f"Unknown operation {self.path}")

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _error(self, status: int, error_type: str, message: str) -> None:
        body = json.dumps({"Type": "User", "Message": message, "message": message})
        self._send(
            status, body.encode("utf-8"), str(uuid.uuid4()), [("x-amzn-ErrorType", error_type)]
        )

    def _send(
        self,
        status: int,
        body: bytes,
        request_id: str,
        extra: list[tuple[str, str]] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-RequestId", request_id)
        if status == 200:
            self.send_header("X-Amz-Executed-Version", "$LATEST")
        for name, value in extra or []:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.access_log:
            super().log_message(format, *args)
