"""The in-process AWS emulation: moto's server, with DynamoDB requests serialized.

moto's backends are not thread-safe, while DynamoDB itself applies each request (and
each transaction) atomically: with a threaded server, two racing conditional writes
could both pass their conditions. One lock around DynamoDB requests restores that.
SQS is left concurrent: its long polls would otherwise hold the lock for seconds.

moto backs every TransactWriteItems up by deep-copying each table it names, so one
transaction costs time in proportion to the whole table (about 1 s at 20,000 items):
a long ``make run`` would make every fork, key-opened session and summary fold slower
than on AWS. ``item_level_transactions`` backs up only the items a transaction names,
and local_runtime/moto_shortcuts.py takes out the costs that grow with the table.

The runtime's own requests (the functions it runs, its pollers, its set-up) do not cross
a socket: ``InProcessRequests`` hands each one to the server's WSGI app in the calling
thread, behind the same lock and fault switch, and builds botocore's response from what
the app answers. The HTTP hop was about a sixth of a runtime's CPU. The server still
listens for everything else (the AWS CLI, a test reading a table).

One fault can be switched on, to watch a failed transcript write and its repair: while
the file ``fail_turn_writes_while`` names exists, every write of a turn item (a PutItem
whose sort key starts ``MSG#``) is answered with DynamoDB's ``500 InternalServerError``.
"""

from __future__ import annotations

import copy
import io
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server
from werkzeug.test import EnvironBuilder, run_wsgi_app

from local_runtime import moto_shortcuts

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_TRANSACTING = threading.local()


class _CopyWithoutTables:
    """moto's ``copy`` module, except that a table is not deep-copied while a transaction
    runs (``item_level_transactions`` backs up its items instead)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table

        if isinstance(value, Table) and getattr(_TRANSACTING, "active", False):
            return value  # its rollback then puts the same table back: a no-op
        return copy.deepcopy(value, memo)


def item_level_transactions() -> None:
    """Make moto's TransactWriteItems back up the items it names instead of whole tables
    (idempotent; the transactions stay all-or-nothing)."""
    from moto.dynamodb import models

    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "item_level", False):
        return
    whole_table_backup = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        backups = _item_backups(self, transact_items)
        _TRANSACTING.active = True
        try:
            whole_table_backup(self, transact_items)
        except BaseException:
            _restore(self, backups)
            raise
        finally:
            _TRANSACTING.active = False

    transact_write_items.item_level = True  # type: ignore[attr-defined]
    models.copy = _CopyWithoutTables()  # type: ignore[assignment]
    setattr(backend, "transact_write_items", transact_write_items)  # noqa: B010


Backup = tuple[str, dict[str, Any], "dict[str, Any] | None"]


def _item_backups(backend: Any, transact_items: list[dict[str, Any]]) -> list[Backup]:
    """Each named item as it is now (None: absent), in DynamoDB JSON."""
    backups: list[Backup] = []
    for entry in transact_items:
        for op in entry.values():
            name = op.get("TableName")
            if name not in backend.tables:
                continue  # moto refuses the transaction before it writes anything
            table = backend.tables[name]
            key = op.get("Key") or {
                attr: op.get("Item", {}).get(attr)
                for attr in (table.hash_key_attr, table.range_key_attr)
                if attr is not None
            }
            try:
                item = backend.get_item(name, key)
            except Exception:  # a malformed key: moto refuses it before any write
                continue
            attributes = copy.deepcopy(item.to_json()["Attributes"]) if item else None
            backups.append((name, key, attributes))
    return backups


def _restore(backend: Any, backups: list[Backup]) -> None:
    for name, key, attributes in reversed(backups):
        if attributes is None:
            if backend.get_item(name, key) is not None:
                backend.delete_item(name, key)
        else:
            backend.put_item(name, attributes)


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


class _Body(io.BytesIO):
    """A response body as botocore reads one from urllib3 (``stream`` for S3's bodies)."""

    def stream(self, **_: Any) -> Iterable[bytes]:
        while chunk := self.read(65536):
            yield chunk


class InProcessRequests:
    """A botocore ``before-send`` handler: a request for ``address`` (host, port) is
    answered by ``app`` in the calling thread; any other request is left to go out."""

    def __init__(self, app: WsgiApp, address: tuple[str, int]) -> None:
        self.app = app
        self.address = address
        self.answered = 0  # requests answered in process (tests/integration/test_local_aws)

    def __call__(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        url = urlsplit(request.url)
        if (url.hostname, url.port) != self.address:
            return None
        body = _body_bytes(request.body)
        headers = [
            (name, value if isinstance(value, str) else value.decode("latin-1"))
            for name, value in request.headers.items()
            if name.lower() not in ("content-length", "transfer-encoding")
        ]
        environ = EnvironBuilder(
            method=request.method,
            base_url=f"{url.scheme}://{url.netloc}",
            path=url.path or "/",
            query_string=url.query,
            headers=headers,
            data=body,
        ).get_environ()
        app_iter, status, response_headers = run_wsgi_app(self.app, environ, buffered=True)
        try:
            content = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
        self.answered += 1
        status_code = int(status.split(" ", 1)[0])
        return AWSResponse(
            request.url,
            status_code,
            HTTPHeaders.from_pairs(response_headers.to_wsgi_list()),
            _Body(content),
        )


def _body_bytes(body: Any) -> bytes:
    """A request body as bytes: botocore sends bytes, text or a file (an S3 upload)."""
    if body is None:
        return b""
    if hasattr(body, "read"):
        body = body.read()
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


class SerializedMotoServer(ThreadedMotoServer):
    def __init__(self, *args: Any, fail_turn_writes_while: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fail_turn_writes_while = fail_turn_writes_while
        self.in_process: InProcessRequests | None = None
        self._shortcuts_installed = False

    def answer_in_process(self) -> None:
        """Answer this process's own requests for the server in process, from now on:
        every botocore session created after this call carries the handler."""
        import botocore.handlers

        assert self._server is not None, "start() first"
        self.in_process = InProcessRequests(self._server.app, self.get_host_and_port())
        botocore.handlers.BUILTIN_HANDLERS.append(("before-send", self.in_process))

    def stop(self) -> None:
        if self.in_process is not None:
            import botocore.handlers

            entry = ("before-send", self.in_process)
            if entry in botocore.handlers.BUILTIN_HANDLERS:
                botocore.handlers.BUILTIN_HANDLERS.remove(entry)
            self.in_process = None
        super().stop()
        if self._shortcuts_installed:
            moto_shortcuts.uninstall()
            self._shortcuts_installed = False

    # Same as ThreadedMotoServer._server_entry, with the app wrapped.
    def _server_entry(self) -> None:
        item_level_transactions()
        moto_shortcuts.install()  # until stop()
        self._shortcuts_installed = True
        app = serialize_dynamodb(DomainDispatcherApplication(create_backend_app))
        if self._fail_turn_writes_while:
            app = fail_turn_writes(app, self._fail_turn_writes_while)
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        # stop() waits for the loop's next poll: 0.5 s by default, on every shutdown.
        self._server.serve_forever(poll_interval=0.05)
