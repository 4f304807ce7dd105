"""The in-process AWS emulation: moto's server, with DynamoDB requests serialized.

moto's backends are not thread-safe, while DynamoDB itself applies each request (and
each transaction) atomically: with a threaded server, two racing conditional writes
could both pass their conditions. One lock around DynamoDB requests restores that.
SQS is left concurrent: its long polls would otherwise hold the lock for seconds.

One fault can be switched on, to watch a failed transcript write and its repair: while
the file ``fail_turn_writes_while`` names exists, every write of a turn item (a PutItem
whose sort key starts ``MSG#``) is answered with DynamoDB's ``500 InternalServerError``.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serialize_dynamodb(app: WsgiApp) -> WsgiApp:
    lock = threading.Lock()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_"):
            with lock:
                return list(app(environ, start_response))
        return app(environ, start_response)

    return wrapped


TURN_SORT_KEY_PREFIX = "MSG#"
INTERNAL_ERROR = json.dumps(
    {
        "__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
        "message": "Internal server error (LOCAL_TURN_WRITES_FAIL_WHILE)",
    }
).encode()


def is_turn_write(body: bytes) -> bool:
    try:
        request = json.loads(body)
        sort_key = request["Item"]["sk"]["S"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(sort_key, str) and sort_key.startswith(TURN_SORT_KEY_PREFIX)


def fail_turn_writes(app: WsgiApp, while_exists: str) -> WsgiApp:
    """Answer turn writes with ``500 InternalServerError`` while ``while_exists`` exists."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if target == "DynamoDB_20120810.PutItem" and os.path.exists(while_exists):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)  # the app reads it again
            if is_turn_write(body):
                start_response(
                    "500 Internal Server Error",
                    [
                        ("Content-Type", "application/x-amz-json-1.0"),
                        ("Content-Length", str(len(INTERNAL_ERROR))),
                    ],
                )
                return [INTERNAL_ERROR]
        return app(environ, start_response)

    return wrapped


class SerializedMotoServer(ThreadedMotoServer):
    def __init__(self, *args: Any, fail_turn_writes_while: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fail_turn_writes_while = fail_turn_writes_while

    # Same as ThreadedMotoServer._server_entry, with the app wrapped.
    def _server_entry(self) -> None:
        app = serialize_dynamodb(DomainDispatcherApplication(create_backend_app))
        if self._fail_turn_writes_while:
            app = fail_turn_writes(app, self._fail_turn_writes_while)
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        # stop() waits for the loop's next poll: 0.5 s by default, on every shutdown.
        self._server.serve_forever(poll_interval=0.05)
