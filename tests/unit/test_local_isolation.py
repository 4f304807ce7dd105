"""The local runtime keeps Powertools' current request per thread: concurrent requests in
one process each see their own event."""

from __future__ import annotations

import threading
import time
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from local_runtime.isolation import isolate_resolver_state


def event(path: str) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": f"GET {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {},
        "requestContext": {"http": {"method": "GET", "path": path}, "stage": "$default"},
        "isBase64Encoded": False,
    }


def test_two_resolvers_answering_at_once_each_see_their_own_request() -> None:
    isolate_resolver_state()
    isolate_resolver_state()  # idempotent
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def make_app() -> APIGatewayHttpResolver:
        app = APIGatewayHttpResolver()

        @app.get("/<name>")
        def read(name: str) -> dict[str, str]:
            barrier.wait(5)  # both requests are being resolved now
            time.sleep(0.01)
            seen[name] = app.current_event.path
            return {}

        return app

    apps = {"a": make_app(), "b": make_app()}
    threads = [
        threading.Thread(target=apps[name].resolve, args=(event(f"/{name}"), None)) for name in apps
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert seen == {"a": "/a", "b": "/b"}
