"""The in-process AWS emulation: moto's server, with DynamoDB requests serialized.

moto's backends are not thread-safe, while DynamoDB itself applies each request (and
each transaction) atomically: with a threaded server, two racing conditional writes
could both pass their conditions. One lock around DynamoDB requests restores that.
SQS is left concurrent: its long polls would otherwise hold the lock for seconds.
"""

from __future__ import annotations

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


class SerializedMotoServer(ThreadedMotoServer):
    # Same as ThreadedMotoServer._server_entry, with the app wrapped.
    def _server_entry(self) -> None:
        app = serialize_dynamodb(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
