"""The stack in one process: moto-backed tables and queues built from template.yaml,
and the template's HTTP routes dispatched to the real handlers through the real
authorizer, without sockets. Used by the integration tests and the benchmark."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlencode

import boto3
from moto.sqs.models import sqs_backends

from convo_memory.adapters.aws_clients import AwsClients
from convo_memory.bootstrap import (
    Adapters,
    Container,
    Infrastructure,
    build_adapters,
    build_services,
)
from convo_memory.config import Settings
from convo_memory.execution_environment import set_container
from convo_memory.ports import MetricsPort
from convo_memory.services.admin import create_workspace, seed_capabilities
from local_runtime.aws_resources import (
    DEFAULT_TEMPLATE,
    LocalResources,
    ensure_resources,
)
from local_runtime.handlers import FunctionRegistry
from local_runtime.http_gateway import (
    HttpRequest,
    Route,
    build_authorizer_event,
    build_http_event,
    match_route,
)
from local_runtime.runtime import Topology, read_topology
from tests.support.fake_aws import (
    FAKE_CREDENTIALS,
    REGION,
    environment,
    fake_aws,
    set_up_clients,
)

IN_PROCESS_TURNS_PER_SECOND = "1000"
IN_PROCESS_TURN_BURST = "1000"


@dataclass
class ApiResponse:
    status: int
    headers: dict[str, str]
    body: Any


class InProcessApi:
    def __init__(self, container: Container, resources: LocalResources) -> None:
        self.container = container
        self.resources = resources
        # The functions (as many environments each as its reserved concurrency, as under
        # make run), routes and authorizers as the template declares them.
        topology = _template_topology()
        self.registry = FunctionRegistry(topology.functions)
        self.routes: list[Route] = topology.routes
        self.authorizers = topology.authorizers

    def invoke(self, function: str, event: dict[str, Any]) -> Any:
        return self.registry.invoke(function, event)

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json_body: Any = None,
        raw_body: bytes | str | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> ApiResponse:
        body = raw_body if raw_body is not None else b""
        if json_body is not None:
            body = json.dumps(json_body)
        if isinstance(body, str):
            body = body.encode()
        given = {name.lower() for name in headers or {}}
        default = [] if "content-type" in given else [("content-type", "application/json")]
        all_headers = [*default, *(headers or {}).items()]
        if token is not None:
            all_headers.append(("authorization", f"Bearer {token}"))
        request = HttpRequest(
            method=method,
            raw_path=path,
            raw_query=urlencode(query or {}),
            headers=all_headers,
            body=body,
        )
        match = match_route(self.routes, method, path)
        assert match is not None  # the template's $default route catches the rest
        context = None
        if match.route.authorizer is not None:
            config = self.authorizers[match.route.authorizer]
            identity = [request.header(header) or "" for header in config.identity_headers]
            if not all(identity):  # API Gateway's own answer, without the authorizer
                return ApiResponse(401, {}, {"message": "Unauthorized"})
            auth = self.invoke(config.function, build_authorizer_event(request, match, identity))
            assert auth["isAuthorized"] is True
            context = auth["context"]
        event = build_http_event(request, match.route.route_key, match.path_parameters, context)
        result = self.invoke(match.route.function, event)
        raw = result.get("body") or ""
        parsed = (
            json.loads(raw) if raw and "json" in str(result.get("headers", {})).lower() else raw
        )
        return ApiResponse(result["statusCode"], result.get("headers") or {}, parsed)


@cache
def _template_topology() -> Topology:
    """template.yaml's functions, routes and authorizers, read once per process: each
    test's stack has registries of its own over the same (unchanged) declarations."""
    return read_topology(DEFAULT_TEMPLATE, None)


_MOTO_LOCK = threading.RLock()


def serialized(client: Any) -> Any:
    """moto's in-process backend is not thread-safe, while DynamoDB itself serializes
    conflicting writes: one lock around every call emulates that for racing tests."""
    call = client._make_api_call

    def locked(operation: str, params: Any) -> Any:
        with _MOTO_LOCK:
            return call(operation, params)

    client._make_api_call = locked
    return client


@dataclass
class AwsBackend:
    """The template's tables, queues and keys in moto, and the environment the functions
    run with (what ``aws_backend`` set; ``serving`` sets it again for each container)."""

    resources: LocalResources
    env: dict[str, str]

    def empty_queues(self) -> None:
        """Every queue emptied, delayed and in-flight messages too, its settings kept:
        moto's purge, on its backend (through a client, a client and a request per queue
        were most of a short test's set-up)."""
        for url in self.resources.queue_urls.values():
            account, name = url.rsplit("/", 2)[-2:]
            sqs_backends[account][REGION].purge_queue(name)


@contextmanager
def aws_backend(env: dict[str, str] | None = None) -> Iterator[AwsBackend]:
    """moto with template.yaml's resources, and the environment the functions run with
    (the template's, plus ``env``) in ``os.environ``; both gone afterwards. A module of
    tests can share one (tests/integration/conftest.py), each test served by a container
    of its own (``serving``)."""
    with fake_aws(REGION):
        resources = ensure_resources(set_up_clients(REGION))
        function_env = {
            **FAKE_CREDENTIALS,
            "AWS_DEFAULT_REGION": REGION,
            "POWERTOOLS_METRICS_NAMESPACE": "ConvoMemoryTest",
            "POWERTOOLS_SERVICE_NAME": "convo-memory",
            # The deployment key that signs nextToken cursors (a secret on AWS).
            "CURSOR_SIGNING_KEY": "in-process-test-cursor-key-0123456789abcdef",
            **resources.env(),
            # Tests and the bench run turns faster than a tenant's limit allows; the
            # limiter still counts every turn (its write is in the bench's figures).
            "WORKSPACE_TURNS_PER_SECOND": IN_PROCESS_TURNS_PER_SECOND,
            "WORKSPACE_TURN_BURST": IN_PROCESS_TURN_BURST,
            **(env or {}),
        }
        with environment(function_env):
            yield AwsBackend(resources, function_env)


@contextmanager
def serving(
    backend: AwsBackend,
    env: dict[str, str] | None = None,
    *,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    metrics: MetricsPort | None = None,
    adapt: Callable[[Adapters, Infrastructure], Adapters] | None = None,
    **clients: Any,
) -> Iterator[InProcessApi]:
    """A container the handlers use, built from the backend's environment plus ``env``,
    over clients of its own (``clients``: boto3 clients by service name override them).
    ``adapt`` puts a test's own adapter in place of a production one (a URL policy over a
    fake resolver, say), wired into the services like any other."""
    with environment({**backend.env, **(env or {})}):
        clients.setdefault("dynamodb", serialized(boto3.client("dynamodb", region_name=REGION)))
        clients.setdefault("sqs", serialized(boto3.client("sqs", region_name=REGION)))
        settings = Settings.from_env()
        adapters, infrastructure = build_adapters(
            settings, AwsClients(clients), clock=clock, metrics=metrics
        )
        container = build_services(
            adapt(adapters, infrastructure) if adapt else adapters,
            infrastructure,
            settings,
            clock,
            monotonic,
            sleep,
        )
        set_container(container)
        try:
            yield InProcessApi(container, backend.resources)
        finally:
            set_container(None)


@contextmanager
def inprocess_stack(
    env: dict[str, str] | None = None, **serving_args: Any
) -> Iterator[InProcessApi]:
    """Moto for every AWS call; tables and queues from template.yaml; the container
    the handlers use is built from the template's environment (plus ``env``), with
    ``serving``'s keywords. Inside another stack (or ``mock_aws``), this one shares its
    moto backend."""
    with aws_backend(env) as backend, serving(backend, **serving_args) as api:
        yield api


def seed_history(api: InProcessApi, session_id: str, messages: int) -> None:
    """Write a long history straight into the table (fast), in the shape turns write:
    one item per turn, fixed-width contents and turn ids, so sizes do not vary with
    the seq."""
    client = api.container.infrastructure.clients["dynamodb"]
    table = api.container.settings.table_name
    pk = {"S": f"SESSION#{session_id}"}
    requests = [
        {
            "PutRequest": {
                "Item": {
                    "pk": pk,
                    "sk": {"S": f"MSG#{seq:010d}"},
                    "id": {"S": f"{(seq + 1) // 2:016x}"},
                    "at": {"S": "2026-01-01T00:00:00.000Z"},
                    "u": {"S": f"message {seq:06d} " + "x" * 105},
                    "a": {"S": f"message {seq + 1:06d} " + "x" * 105},
                }
            }
        }
        for seq in range(1, messages + 1, 2)
    ]
    for start in range(0, len(requests), 25):
        client.batch_write_item(RequestItems={table: requests[start : start + 25]})


def new_workspace(api: InProcessApi, name: str) -> tuple[str, str]:
    """A seeded workspace: (workspace_id, token)."""
    creds = create_workspace(api.container.adapters.stores.tokens, name)
    seed_capabilities(api.container.adapters.stores.capabilities, creds.workspace_id)
    return creds.workspace_id, creds.token
