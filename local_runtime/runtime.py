"""``python -m local_runtime``: the whole stack on 127.0.0.1, no cloud account, no Docker.

1. AWS: an in-process moto server (or ``AWS_ENDPOINT_URL`` when set), with the tables
   and queues of template.yaml and the functions' environment exported.
2. Seeding: the dev workspace ``ws-dev`` (``CONVO_DEV_TOKEN``), one ``ws-<name>`` per
   ``CONVO_DEV_TOKENS`` pair, one capability of each kind in each; and in ``ws-dev`` the
   demo session and run the sample events in ``events/`` name (``demo_data``).
3. The HttpApi on ``PORT`` (3000), the Lambda Invoke API on ``LAMBDA_PORT`` (3001), and
   one poller per SQS event source.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import yaml

from local_runtime.banner import BannerInfo, render_banner
from local_runtime.handlers import FunctionRegistry, LambdaFunction
from local_runtime.http_gateway import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    AuthorizerConfig,
    HttpGateway,
    Route,
    load_stream_door,
)
from local_runtime.lambda_api import LambdaApi
from local_runtime.queue_pollers import EventSource, QueuePoller

HOST = "127.0.0.1"
DEFAULT_PORT = 3000
DEFAULT_LAMBDA_PORT = 3001
DEFAULT_VISIBILITY_SECONDS = 2
DEFAULT_REAUTHORIZE_SECONDS = 300
DEV_WORKSPACE = "dev"
TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"
POLLER_JOIN_SECONDS = 5.0

_WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A header value (printable ASCII, no spaces); create_workspace wants at least 16 characters.
_TOKEN = re.compile(r"^[\x21-\x7e]{16,512}$")


# The summary settings the template takes as parameters, for ``make run``.
LOCAL_SUMMARY_VARIABLES = {
    "CONVO_SUMMARY_CONNECTION": "SUMMARY_CONNECTION",
    "CONVO_SUMMARY_MODEL_ID": "SUMMARY_MODEL_ID",
    "CONVO_SUMMARY_BATCH_TURNS": "SUMMARY_BATCH_TURNS",
}


class ConfigError(ValueError):
    """The environment asks for something the runtime cannot do."""


class StartupError(RuntimeError):
    """Something the runtime needs could not be set up."""


def log(message: str) -> None:
    print(f"[local_runtime] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class RuntimeConfig:
    port: int = DEFAULT_PORT
    lambda_port: int = DEFAULT_LAMBDA_PORT
    dev_token: str = ""
    dev_token_generated: bool = False
    workspaces: tuple[tuple[str, str], ...] = ()
    endpoint_url: str | None = None
    visibility_seconds: int = DEFAULT_VISIBILITY_SECONDS
    authorizer_cache_seconds: float | None = None
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    access_log: bool = False
    template_path: Path = TEMPLATE
    # CONVO_PROVIDER_CONNECTIONS, exported to the functions as PROVIDER_CONNECTIONS.
    provider_connections: str = ""
    connection_names: tuple[str, ...] = ("embedded",)
    # CONVO_TOOL_ALLOWED_HOSTS, exported to the functions as TOOL_ALLOWED_HOSTS.
    tool_allowed_hosts: tuple[str, ...] = ()
    # CONVO_SUMMARY_* given for make run, as the functions' SUMMARY_* variables.
    summary_settings: tuple[tuple[str, str], ...] = ()
    # CONVO_WORKSPACE_TURNS_PER_SECOND, exported as WORKSPACE_TURNS_PER_SECOND ("": the
    # template's default, as deployed).
    workspace_turns_per_second: str = ""
    # CONVO_WORKSPACE_TURN_BURST, exported as WORKSPACE_TURN_BURST ("": the template's).
    workspace_turn_burst: str = ""
    # CONVO_WORKSPACE_MAX_SLOW_TURNS, exported as WORKSPACE_MAX_SLOW_TURNS ("": the
    # template's).
    workspace_max_slow_turns: str = ""
    # LOCAL_TURN_WRITES_FAIL_WHILE: the embedded emulation fails turn writes while this
    # file exists (to watch a repair).
    turn_writes_fail_while: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RuntimeConfig:
        """Read ``PORT``, ``LAMBDA_PORT``, ``CONVO_DEV_TOKEN(S)``,
        ``CONVO_PROVIDER_CONNECTIONS``, ``CONVO_TOOL_ALLOWED_HOSTS``, ``CONVO_SUMMARY_*``,
        ``CONVO_WORKSPACE_TURNS_PER_SECOND``, ``CONVO_WORKSPACE_TURN_BURST``,
        ``CONVO_WORKSPACE_MAX_SLOW_TURNS`` and the LOCAL_* knobs."""
        dev_token = env.get("CONVO_DEV_TOKEN", "").strip()
        generated = not dev_token
        if generated:
            dev_token = secrets.token_urlsafe(24)
        elif not _TOKEN.match(dev_token):
            raise ConfigError(
                "CONVO_DEV_TOKEN must be 16-512 printable ASCII characters without spaces"
            )
        workspaces = parse_dev_tokens(env.get("CONVO_DEV_TOKENS", ""), dev_token)
        connections = env.get("CONVO_PROVIDER_CONNECTIONS", "").strip()
        connection_names = parse_provider_connections(connections)
        cache = env.get("LOCAL_AUTHORIZER_CACHE_SECONDS", "").strip()
        return cls(
            port=_port(env, "PORT", DEFAULT_PORT),
            lambda_port=_port(env, "LAMBDA_PORT", DEFAULT_LAMBDA_PORT),
            dev_token=dev_token,
            dev_token_generated=generated,
            workspaces=tuple(workspaces),
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            visibility_seconds=int(
                _number(env, "LOCAL_QUEUE_VISIBILITY_SECONDS", DEFAULT_VISIBILITY_SECONDS)
            ),
            authorizer_cache_seconds=(
                _number(env, "LOCAL_AUTHORIZER_CACHE_SECONDS", 0) if cache else None
            ),
            request_timeout_seconds=_number(
                env, "LOCAL_REQUEST_TIMEOUT_SECONDS", DEFAULT_REQUEST_TIMEOUT_SECONDS
            )
            or DEFAULT_REQUEST_TIMEOUT_SECONDS,
            access_log=env.get("LOCAL_ACCESS_LOG", "").lower() in ("1", "true", "yes"),
            template_path=Path(env.get("LOCAL_TEMPLATE", "") or TEMPLATE),
            provider_connections=connections,
            connection_names=tuple(connection_names),
            tool_allowed_hosts=parse_tool_allowed_hosts(env.get("CONVO_TOOL_ALLOWED_HOSTS", "")),
            summary_settings=tuple(
                (variable, env[local].strip())
                for local, variable in LOCAL_SUMMARY_VARIABLES.items()
                if env.get(local, "").strip()
            ),
            workspace_turns_per_second=parse_turn_limit(env, "CONVO_WORKSPACE_TURNS_PER_SECOND"),
            workspace_turn_burst=parse_turn_limit(env, "CONVO_WORKSPACE_TURN_BURST"),
            workspace_max_slow_turns=parse_turn_limit(env, "CONVO_WORKSPACE_MAX_SLOW_TURNS"),
            turn_writes_fail_while=env.get("LOCAL_TURN_WRITES_FAIL_WHILE", "").strip(),
        )


def parse_tool_allowed_hosts(raw: str) -> tuple[str, ...]:
    """``CONVO_TOOL_ALLOWED_HOSTS``: comma-separated ``host`` or ``host:port`` (validated
    like the template parameter ``ToolAllowedHosts``)."""
    from convo_memory.domain.allowed_hosts import parse_allowed_hosts

    entries = tuple(item.strip() for item in raw.split(",") if item.strip())
    try:
        parse_allowed_hosts(entries)
    except ValueError as exc:
        raise ConfigError(f"CONVO_TOOL_ALLOWED_HOSTS: {exc}") from None
    return entries


# The turn limits' variables, checked like their stack parameters: (lowest, highest).
TURN_LIMIT_RANGES = {
    "CONVO_WORKSPACE_TURNS_PER_SECOND": (0, 10_000),  # WorkspaceTurnsPerSecond; 0: off
    "CONVO_WORKSPACE_TURN_BURST": (1, 100_000),  # WorkspaceTurnBurst
    "CONVO_WORKSPACE_MAX_SLOW_TURNS": (0, 10_000),  # WorkspaceMaxSlowTurns; 0: off
}


def parse_turn_limit(env: Mapping[str, str], variable: str) -> str:
    """One of ``TURN_LIMIT_RANGES``' variables as the functions' setting: an integer in
    its parameter's range, or "" (unset: the template's default, as deployed)."""
    raw = env.get(variable, "").strip()
    if not raw:
        return ""
    low, high = TURN_LIMIT_RANGES[variable]
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigError(f"{variable} must be an integer from {low} to {high}, got {raw!r}")
    return str(int(raw))


def parse_provider_connections(raw: str) -> list[str]:
    """The connection names of ``CONVO_PROVIDER_CONNECTIONS`` (validated like the
    template parameter ``ProviderConnections``), ``embedded`` first."""
    from convo_memory.domain.connections import parse_connections

    try:
        return parse_connections(raw).names()
    except ValueError as exc:
        raise ConfigError(f"CONVO_PROVIDER_CONNECTIONS: {exc}") from None


def parse_dev_tokens(raw: str, dev_token: str = "") -> list[tuple[str, str]]:
    """``name=token,name2=token2`` -> [(name, token), ...], refusing what cannot work."""
    pairs: list[tuple[str, str]] = []
    names = {DEV_WORKSPACE}
    tokens = {dev_token} if dev_token else set()
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, token = item.partition("=")
        name, token = name.strip(), token.strip()
        if not sep or not name or not token:
            raise ConfigError(
                f"CONVO_DEV_TOKENS: {item!r} is not name=token "
                "(expected e.g. CONVO_DEV_TOKENS='acme=tok-acme-123,globex=tok-globex-456')"
            )
        if not _WORKSPACE_NAME.match(name):
            raise ConfigError(
                f"CONVO_DEV_TOKENS: workspace name {name!r} must be 1-64 letters, digits, "
                "'_', '.' or '-'"
            )
        if not _TOKEN.match(token):
            raise ConfigError(
                f"CONVO_DEV_TOKENS: the token of {name!r} must be 16-512 printable ASCII "
                "characters without spaces or commas"
            )
        if name in names:
            reserved = " (reserved for CONVO_DEV_TOKEN)" if name == DEV_WORKSPACE else ""
            raise ConfigError(f"CONVO_DEV_TOKENS: workspace {name!r} given twice{reserved}")
        if token in tokens:
            raise ConfigError(f"CONVO_DEV_TOKENS: the token of {name!r} is already in use")
        names.add(name)
        tokens.add(token)
        pairs.append((name, token))
    return pairs


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a port number, got {raw!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{name} must be between 0 and 65535, got {port}")
    return port


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"{name} must not be negative, got {raw!r}")
    return value


# --------------------------------------------------------------------------- template


class QueueSource(NamedTuple):
    """One SQS event source mapping of the template."""

    function: str
    queue: str  # the queue's logical id
    batch_size: int
    report_batch_item_failures: bool
    # ScalingConfig.MaximumConcurrency: at most this many concurrent invocations.
    maximum_concurrency: int | None = None


@dataclass(frozen=True)
class Topology:
    """What the runtime serves, read from template.yaml."""

    functions: list[LambdaFunction]
    routes: list[Route]
    authorizers: dict[str, AuthorizerConfig]
    queue_sources: list[QueueSource] = field(default_factory=list)


def read_topology(template_path: Path, authorizer_cache_seconds: float | None) -> Topology:
    from local_runtime import aws_resources

    template = aws_resources.load_template(template_path)
    specs = aws_resources.function_specs(template_path)
    resources: dict[str, Any] = template.get("Resources") or {}
    global_props = (template.get("Globals") or {}).get("Function") or {}

    authorizers: dict[str, AuthorizerConfig] = {}
    default_authorizer: str | None = None
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::HttpApi":
            continue
        auth = (resource.get("Properties") or {}).get("Auth") or {}
        default_authorizer = auth.get("DefaultAuthorizer") or default_authorizer
        for name, spec in (auth.get("Authorizers") or {}).items():
            authorizers[name] = _authorizer_config(
                name, spec, authorizer_cache_seconds, aws_resources.parameter_defaults(template)
            )

    functions: list[LambdaFunction] = []
    routes: list[Route] = []
    sources: list[QueueSource] = []
    for name, spec in specs.items():
        props = {**global_props, **((resources.get(name) or {}).get("Properties") or {})}
        functions.append(
            LambdaFunction(
                name=name,
                code_uri=spec.code_uri,
                handler=spec.handler,
                timeout_seconds=float(spec.timeout),
                memory_mb=spec.memory_size,
                reserved_concurrency=_reserved_concurrency(
                    props, aws_resources.parameter_defaults(template)
                ),
            )
        )
        auth_by_route = _route_authorizers(props, default_authorizer)
        for method, path in spec.http_routes:
            authorizer = auth_by_route.get((method, path), default_authorizer)
            routes.append(Route(method, path, name, authorizer))
        if spec.sqs_queue_logical_id:
            sources.append(
                QueueSource(
                    name,
                    spec.sqs_queue_logical_id,
                    spec.sqs_batch_size or 10,
                    spec.report_batch_item_failures,
                    _maximum_concurrency(props, aws_resources.parameter_defaults(template)),
                )
            )
    for route in routes:
        if route.authorizer is not None and route.authorizer not in authorizers:
            raise StartupError(f"{route.route_key}: unknown authorizer {route.authorizer!r}")
    return Topology(functions, routes, authorizers, sources)


def _reserved_concurrency(props: Mapping[str, Any], parameters: Mapping[str, str]) -> int | None:
    """``ReservedConcurrentExecutions`` (``!If [Reserve..., !Ref Param, !Ref
    AWS::NoValue]``: the parameter's default; 0 reserves none). The turn functions run
    as many copies as on AWS, so one workspace at its cap of slow turns
    (``WorkspaceMaxSlowTurns``) leaves copies for every other workspace."""
    value = props.get("ReservedConcurrentExecutions")
    if isinstance(value, dict) and "Fn::If" in value:
        value = value["Fn::If"][1]
    if isinstance(value, dict) and "Ref" in value:
        value = parameters.get(str(value["Ref"]))
    reserved = int(str(value)) if value is not None else 0
    return reserved or None


def _maximum_concurrency(props: Mapping[str, Any], parameters: Mapping[str, str]) -> int | None:
    """The SQS event's ``ScalingConfig.MaximumConcurrency`` (a parameter: its default)."""
    for event in (props.get("Events") or {}).values():
        if event.get("Type") != "SQS":
            continue
        value = ((event.get("Properties") or {}).get("ScalingConfig") or {}).get(
            "MaximumConcurrency"
        )
        if isinstance(value, dict) and "Ref" in value:
            value = parameters.get(str(value["Ref"]))
        return None if value is None else int(str(value))
    return None


def _authorizer_config(
    name: str,
    spec: Mapping[str, Any],
    cache_override: float | None,
    parameters: Mapping[str, str] | None = None,
) -> AuthorizerConfig:
    arn = spec.get("FunctionArn")
    function = None
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        function = str(arn["Fn::GetAtt"][0])
    elif isinstance(arn, dict) and "Ref" in arn:
        function = str(arn["Ref"])
    if function is None:
        raise StartupError(f"authorizer {name}: FunctionArn must be !GetAtt <Function>.Arn")
    identity = spec.get("Identity") or {}
    # No identity source: API Gateway invokes the authorizer on every request and cannot
    # cache its answers (there is no key to cache them by).
    headers = tuple(str(header) for header in identity.get("Headers") or [])
    ttl = identity.get("ReauthorizeEvery", DEFAULT_REAUTHORIZE_SECONDS)
    if isinstance(ttl, dict) and "Ref" in ttl:  # a template parameter: its default
        ttl = (parameters or {}).get(str(ttl["Ref"]), DEFAULT_REAUTHORIZE_SECONDS)
    if cache_override is not None:
        ttl = cache_override
    return AuthorizerConfig(
        function=function,
        identity_headers=headers,
        ttl_seconds=float(ttl) if headers else 0.0,
        simple_responses=bool(spec.get("EnableSimpleResponses", False)),
    )


def _route_authorizers(
    props: Mapping[str, Any], default: str | None
) -> dict[tuple[str, str], str | None]:
    """Per-event ``Auth: {Authorizer: NONE | name}`` overrides of the default authorizer."""
    overrides: dict[tuple[str, str], str | None] = {}
    for event in (props.get("Events") or {}).values():
        event_props = event.get("Properties") or {}
        if event.get("Type") != "HttpApi" or "Auth" not in event_props:
            continue
        name = (event_props.get("Auth") or {}).get("Authorizer", default)
        key = (str(event_props.get("Method", "ANY")).upper(), str(event_props.get("Path")))
        overrides[key] = None if name == "NONE" else name
    return overrides


# --------------------------------------------------------------------------- runtime


def quiet_logs() -> None:
    """moto and werkzeug would log every AWS request the handlers make."""
    for name in ("werkzeug", "moto", "botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)


class LocalRuntime:
    """Starts and stops every part, in order."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.stopping = threading.Event()
        self._moto: Any = None
        self.endpoint_url = ""
        self.gateway: HttpGateway | None = None
        self.lambda_api: LambdaApi | None = None
        self.pollers: list[QueuePoller] = []
        self.async_events: Any = None
        self._threads: list[threading.Thread] = []
        self.skipped: list[str] = []
        self.capabilities: list[str] = []
        self.workspace_ids: list[str] = []  # "name (id)", as the banner shows them

    # start ------------------------------------------------------------------

    def start(self) -> BannerInfo:
        try:
            topology = read_topology(
                self.config.template_path, self.config.authorizer_cache_seconds
            )
        except (OSError, ValueError, LookupError, yaml.YAMLError) as exc:
            raise StartupError(f"cannot read {self.config.template_path}: {exc!r}") from exc
        registry = FunctionRegistry(topology.functions)
        self._bind_servers(topology, registry)
        self._start_aws()
        resources = self._create_resources()
        self._seed()
        missing = [f for f in topology.functions if not f.handler_file.is_file()]
        for function in missing:
            if (function.code_uri / function.handler).is_file():
                # run.sh behind the Lambda Web Adapter: the streaming door. Its app is
                # served on the API port, streaming, as its Function URL would.
                assert self.gateway is not None
                self.gateway.stream_door = load_stream_door(function)
            else:
                log(f"warning: {function.name}: no handler file {function.handler_file} yet")
        self._start_pollers(topology, registry, resources, {f.name for f in missing})
        self._start_async_events(registry, resources)
        assert self.gateway is not None and self.lambda_api is not None
        self._serve(self.gateway)
        self._serve(self.lambda_api)
        return BannerInfo(
            api_url=f"http://{HOST}:{self.gateway.server_address[1]}",
            lambda_url=f"http://{HOST}:{self.lambda_api.server_address[1]}",
            aws_endpoint=self.endpoint_url,
            aws_emulated=self._moto is not None,
            dev_token=self.config.dev_token,
            dev_token_generated=self.config.dev_token_generated,
            workspaces=self.workspace_ids,
            capabilities=self.capabilities,
            connections=self.config.connection_names,
            tool_hosts=self.config.tool_allowed_hosts,
            skipped=self.skipped,
        )

    def _bind_servers(self, topology: Topology, registry: FunctionRegistry) -> None:
        # Bind first, so that a port in use fails before anything slow happens; handlers
        # are loaded only once the environment is complete, on first use.
        try:
            self.gateway = HttpGateway(
                (HOST, self.config.port),
                topology.routes,
                registry,
                topology.authorizers,
                self.config.access_log,
                self.config.request_timeout_seconds,
            )
        except OSError as exc:
            raise StartupError(f"cannot listen on {HOST}:{self.config.port} (PORT): {exc}") from exc
        try:
            self.lambda_api = LambdaApi(
                (HOST, self.config.lambda_port), registry, self.config.access_log
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {HOST}:{self.config.lambda_port} (LAMBDA_PORT): {exc}"
            ) from exc

    def _start_aws(self) -> None:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        os.environ["AWS_DEFAULT_REGION"] = region
        os.environ["AWS_REGION"] = region
        if self.config.endpoint_url:
            self.endpoint_url = self.config.endpoint_url
            if not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")):
                # DynamoDB Local and LocalStack accept any credentials.
                os.environ["AWS_ACCESS_KEY_ID"] = "local"
                os.environ["AWS_SECRET_ACCESS_KEY"] = "local"
            return
        from local_runtime.aws_emulation import SerializedMotoServer

        # moto takes any credentials; existing ones are kept for a service the user
        # points elsewhere on purpose (AWS_ENDPOINT_URL_<SERVICE> beats AWS_ENDPOINT_URL).
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self._moto = SerializedMotoServer(
            ip_address=HOST,
            port=0,
            verbose=False,
            fail_turn_writes_while=self.config.turn_writes_fail_while,
        )
        self._moto.start()
        self._moto.answer_in_process()
        host, port = self._moto.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        os.environ["AWS_ENDPOINT_URL"] = self.endpoint_url

    def _create_resources(self) -> Any:
        from local_runtime import aws_resources

        try:
            resources = aws_resources.ensure_resources(
                self._clients(), template_path=self.config.template_path
            )
        except Exception as exc:
            raise StartupError(
                f"cannot create the tables and queues at {self.endpoint_url}: {exc}"
            ) from exc
        os.environ.update(resources.env())
        for key in resources.missing_kms_keys:
            log(f"warning: no KMS at {self.endpoint_url}: {key} not created (webhook tools off)")
        if self.config.provider_connections:
            os.environ["PROVIDER_CONNECTIONS"] = self.config.provider_connections
        if self.config.tool_allowed_hosts:
            os.environ["TOOL_ALLOWED_HOSTS"] = ",".join(self.config.tool_allowed_hosts)
        os.environ.update(dict(self.config.summary_settings))
        if self.config.workspace_turns_per_second:
            os.environ["WORKSPACE_TURNS_PER_SECOND"] = self.config.workspace_turns_per_second
        if self.config.workspace_turn_burst:
            os.environ["WORKSPACE_TURN_BURST"] = self.config.workspace_turn_burst
        if self.config.workspace_max_slow_turns:
            os.environ["WORKSPACE_MAX_SLOW_TURNS"] = self.config.workspace_max_slow_turns
        # The emulation has no Bedrock: a guardrail is refused at creation (422) rather
        # than withholding every answer, unless Bedrock itself is named.
        if not os.environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
            os.environ["BEDROCK_AVAILABLE"] = "false"
        # A turn the repair queue does not take goes to RepairFunction as an asynchronous
        # invocation: the functions' Lambda clients call this runtime's Lambda API port.
        if self.lambda_api is not None:
            lambda_url = f"http://{HOST}:{self.lambda_api.server_address[1]}"
            os.environ.setdefault("AWS_ENDPOINT_URL_LAMBDA", lambda_url)
            os.environ.setdefault("REPAIR_FUNCTION_NAME", "RepairFunction")
        # The template's allow-lists mirror IAM grants; locally there is no IAM to mirror.
        for name in ("PROVIDER_SECRET_ARNS", "PROVIDER_PARAMETER_NAMES"):
            os.environ.pop(name, None)
        # The key that signs nextToken cursors; on AWS a Secrets Manager secret. A fresh
        # one per start unless given, so cursors do not outlive the runtime by default.
        os.environ.setdefault("CURSOR_SIGNING_KEY", secrets.token_hex(32))
        return resources

    @staticmethod
    def _clients() -> Any:
        """The process's boto3 clients, each built once: the ones the functions it runs
        use too (they reach the emulator through ``AWS_ENDPOINT_URL``)."""
        from convo_memory.execution_environment import aws_clients

        return aws_clients()

    def _seed(self) -> None:
        # Imported only now: the container reads the environment exported above.
        from convo_memory.config import SettingsError
        from convo_memory.execution_environment import get_container
        from convo_memory.services.admin import create_workspace, seed_capabilities
        from local_runtime.demo_data import seed_demo_records, workspace_id_for

        try:
            stores = get_container().adapters.stores
        except SettingsError as exc:
            raise StartupError(str(exc)) from None
        for name, token in ((DEV_WORKSPACE, self.config.dev_token), *self.config.workspaces):
            credentials = create_workspace(stores.tokens, name, token, workspace_id_for(name))
            capabilities = seed_capabilities(stores.capabilities, credentials.workspace_id)
            if not self.capabilities:
                self.capabilities = [_capability_label(cap) for cap in capabilities]
            if name == DEV_WORKSPACE:
                # What the sample events in events/ name (workspace ws-dev, demo ids).
                seed_demo_records(stores, credentials.workspace_id)
            self.workspace_ids.append(f"{name} ({credentials.workspace_id})")

    def _start_pollers(
        self,
        topology: Topology,
        registry: FunctionRegistry,
        resources: Any,
        missing: set[str],
    ) -> None:
        sqs = self._clients()["sqs"]
        for function, queue_id, batch_size, report_failures, concurrency in topology.queue_sources:
            url = resources.queue_urls[queue_id]
            if function in missing:
                self.skipped.append(f"{queue_id} -> {function} (no handler yet)")
                continue
            sqs.set_queue_attributes(
                QueueUrl=url,
                Attributes={"VisibilityTimeout": str(self.config.visibility_seconds)},
            )
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            source = EventSource(function, url, arn, batch_size, report_failures, concurrency)
            poller = QueuePoller(source, registry, sqs)
            poller.start()
            self.pollers.append(poller)

    def _start_async_events(self, registry: FunctionRegistry, resources: Any) -> None:
        """Lambda's asynchronous invocations (retries, on-failure destinations): the
        functions' own boto3 Lambda clients reach them through the Lambda API port."""
        from local_runtime.async_events import AsyncEvents, async_invoke_configs
        from local_runtime.aws_resources import load_template

        assert self.lambda_api is not None
        configs = async_invoke_configs(
            load_template(self.config.template_path), resources.queue_urls
        )
        sqs = self._clients()["sqs"]
        self.async_events = AsyncEvents(registry, configs, lambda: sqs)
        self.lambda_api.async_events = self.async_events
        self.async_events.start()

    def _serve(self, server: HttpGateway | LambdaApi) -> None:
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=type(server).__name__,
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    # stop -------------------------------------------------------------------

    def stop(self) -> None:
        """Stop serving, stop polling, stop moto; every wait is bounded."""
        for poller in self.pollers:  # first: their last long polls end meanwhile
            poller.stop()
        for server in (self.gateway, self.lambda_api):
            if server is None:
                continue
            if any(thread.name == type(server).__name__ for thread in self._threads):
                server.shutdown()
            server.server_close()
        if self.async_events is not None:
            self.async_events.stop()
        for poller in self.pollers:
            poller.join(POLLER_JOIN_SECONDS)
            if poller.busy:
                log(f"warning: {poller.name} still busy at exit")
        if self._moto is not None:
            self._moto.stop()
            self._moto = None


def _capability_label(capability: Any) -> str:
    """seed_capabilities returns ids; a Capability (or its dict) also reads well."""
    if isinstance(capability, str):
        return capability
    if isinstance(capability, dict):
        return f"{capability.get('id')} ({capability.get('kind')})"
    return f"{getattr(capability, 'id', '?')} ({getattr(capability, 'kind', '?')})"


# --------------------------------------------------------------------------- main


def main() -> int:
    quiet_logs()
    try:
        config = RuntimeConfig.from_env(os.environ)
    except ConfigError as exc:
        log(f"error: {exc}")
        return 2

    runtime = LocalRuntime(config)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if runtime.stopping.is_set():
            log("stopping now")
            os._exit(1)
        runtime.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        info = runtime.start()
    except (StartupError, ConfigError) as exc:
        log(f"error: {exc}")
        runtime.stop()
        return 1
    except BaseException:
        runtime.stop()
        raise
    if not runtime.stopping.is_set():
        print(render_banner(info), flush=True)
    while not runtime.stopping.wait(0.5):
        pass
    log("shutting down")
    runtime.stop()
    log("stopped")
    return 0
