"""The composition root: the one place adapters are built and wired into services.

Production calls ``get_container()``: everything is built once per container (cold
start), lazily, so that importing a handler stays cheap and clients are reused across
warm invocations. Tests call ``build_container`` with fakes for any port (stores,
queues, metrics, providers, clock): the services are wired the same way either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from convo_memory.config import Settings, SettingsError

if TYPE_CHECKING:
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.adapters.tools.url_policy import UrlPolicy
    from convo_memory.domain.models import Capability
    from convo_memory.ports import (
        ContentFilter,
        MetricsPort,
        ModelProvider,
        QueuePort,
        SecretSealer,
        Stores,
        Summarizer,
        Toolbox,
        TurnLimiter,
    )
    from convo_memory.services.auth import TokenResolver
    from convo_memory.services.catalog import CapabilityCatalog, RunTraces
    from convo_memory.services.recording import TurnRecorder
    from convo_memory.services.retention import RetentionService
    from convo_memory.services.sessions import SessionService
    from convo_memory.services.summaries import SummaryService
    from convo_memory.services.turns import TurnService

logger = logging.getLogger(__name__)


@dataclass
class Container:
    settings: Settings
    stores: Stores
    catalog: CapabilityCatalog
    runs: RunTraces
    sessions: SessionService
    turns: TurnService
    recorder: TurnRecorder
    summaries: SummaryService
    retention: RetentionService
    tokens: TokenResolver
    metrics: MetricsPort
    summary_queue: QueuePort | None = None
    repair_queue: QueuePort | None = None
    idempotency: Any = None
    adapters: Any = None
    tools: Any = None
    cursors: Any = None
    clients: dict[str, Any] = field(default_factory=dict)
    turn_limiter: TurnLimiter | None = None


_lock = threading.Lock()
_container: Container | None = None
# A configuration this execution environment could not load: logged once, then re-raised.
_settings_failure: SettingsError | None = None
_token_resolver: TokenResolver | None = None
# "Not given": build the production adapter. ``None`` means "none" (e.g. no queue).
DEFAULT: Any = object()


def aws_client(service: str, **config: Any) -> Any:
    """A boto3 client with short timeouts and standard retries (a session per client:
    boto3's default session is not thread-safe)."""
    import boto3
    from botocore.config import Config

    defaults: dict[str, Any] = {
        "connect_timeout": 2,
        "read_timeout": 10,
        "retries": {"max_attempts": 3, "mode": "standard"},
    }
    defaults.update(config)
    session: Any = boto3.session.Session()
    return session.client(service, config=Config(**defaults))


def build_container(
    settings: Settings | None = None,
    *,
    stores: Stores | None = None,
    summary_queue: Any = DEFAULT,
    repair_queue: Any = DEFAULT,
    metrics: MetricsPort | None = None,
    provider_for: Callable[[Capability], ModelProvider] | None = None,
    filter_for: Callable[[Capability], ContentFilter | None] | None = None,
    summarizer_for: Callable[[Capability], Summarizer] | None = None,
    toolbox_for: Callable[[Capability], Toolbox] | None = None,
    tool_urls: UrlPolicy | None = None,
    sealer: SecretSealer | None = None,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    turn_limiter: TurnLimiter | None = None,
    **clients: Any,
) -> Container:
    """Wire the services. Ports not given are built from ``settings`` (over fake stores,
    no turn limit unless one is given); ``clients`` may override the boto3 clients
    (``dynamodb``, ``sqs``, ``bedrock-runtime``, ``secretsmanager``, ``ssm``, ``kms``)."""
    from convo_memory.adapters.registry import summary_provider
    from convo_memory.cursors import CursorCodec, key_source
    from convo_memory.ports import NoTurnLimit
    from convo_memory.services.agent_loop import AgentLoop
    from convo_memory.services.answering import Answerer
    from convo_memory.services.auth import TokenResolver
    from convo_memory.services.catalog import CapabilityCatalog, RunTraces
    from convo_memory.services.recording import TurnRecorder
    from convo_memory.services.retention import RetentionPolicy, RetentionService
    from convo_memory.services.sessions import SessionService
    from convo_memory.services.summaries import CHUNK_MESSAGES, SummaryPolicy, SummaryService
    from convo_memory.services.summary_trigger import SummaryTrigger
    from convo_memory.services.turns import TurnPolicy, TurnService

    settings = settings or Settings.from_env()
    dynamodb = clients.get("dynamodb")
    if stores is None:
        from convo_memory.adapters.dynamo.stores import dynamo_stores

        dynamodb = dynamodb or aws_client("dynamodb")
        stores = dynamo_stores(dynamodb, settings.table_name, settings.runs_table_name)
        limited = settings.workspace_turns_per_second > 0 and settings.turn_limits_table_name
        if turn_limiter is None and limited:
            turn_limiter = DEFAULT  # the DynamoDB limiter, once metrics exist
    if summary_queue is DEFAULT:
        summary_queue = _sqs_queue(settings.summary_queue_url, clients)
    if repair_queue is DEFAULT:
        repair_queue = _sqs_queue(settings.repair_queue_url, clients)
    if metrics is None:
        from convo_memory.adapters.metrics import PowertoolsMetrics

        metrics = PowertoolsMetrics()
    if turn_limiter is DEFAULT:
        turn_limiter = _dynamo_turn_limiter(settings, dynamodb, metrics, clock)
    adapters = _adapter_registry(settings, clients)
    if provider_for is None:
        from convo_memory.adapters.metering import metered

        def provider_for(cap: Capability) -> ModelProvider:
            # Every model call measured (latency, tokens), by connection.
            provider = adapters.provider(cap.provider, cap.kind, cap.tools)
            return metered(provider, metrics, cap.provider.connection)

    filter_for = filter_for or (lambda cap: adapters.content_filter(cap.content_filter))
    default_summary = settings.summary_default_provider
    summarizer_for = summarizer_for or (
        lambda cap: adapters.summarizer(summary_provider(cap, default_summary))
    )
    tools = _tool_adapters(settings, clients, tool_urls, sealer)
    toolbox_for = toolbox_for or tools.toolbox

    catalog = CapabilityCatalog(
        stores.capabilities,
        settings.cache_ttl_seconds,
        connections=settings.provider_connections,
        tool_urls=tools.policy,
        sealer=tools.sealer,
    )
    trigger = SummaryTrigger(
        summary_queue,
        settings.summary_coalesce_seconds,
        settings.summary_delay_seconds,
        metrics,
        clock,
    )
    recorder = TurnRecorder(
        stores.turns, stores.sessions, repair_queue, metrics, after_repair=trigger.after_repair
    )
    turns = TurnService(
        catalog=catalog,
        sessions=stores.sessions,
        turns=stores.turns,
        answerer=Answerer(
            provider_for,
            filter_for,
            stores.runs,
            metrics,
            toolbox_for=toolbox_for,
            loop=AgentLoop(tool_timeout_seconds=settings.tool_timeout_seconds, monotonic=monotonic),
            monotonic=monotonic,
        ),
        recorder=recorder,
        trigger=trigger,
        policy=TurnPolicy(
            max_input_chars=settings.max_input_chars,
            max_stored_answer_chars=settings.max_stored_answer_chars,
            digest_max_chars=settings.digest_max_chars,
            digest_retention_seconds=settings.digest_retention_hours * 3600,
            activity_granularity_seconds=settings.activity_granularity_seconds,
            turn_deadline_seconds=settings.turn_deadline_seconds,
        ),
        clock=clock,
        monotonic=monotonic,
    )
    summaries = SummaryService(
        sessions=stores.sessions,
        turns=stores.turns,
        summaries=stores.summaries,
        catalog=catalog,
        summarizer_for=summarizer_for,
        policy=SummaryPolicy(
            batch_turns=settings.summary_batch_turns,
            # A steady conversation's batch is always one summarizer call.
            chunk_messages=max(CHUNK_MESSAGES, 2 * settings.summary_batch_turns),
        ),
        metrics=metrics,
        clock=clock,
    )
    retention = RetentionService(
        stores.retention,
        RetentionPolicy(
            idle_archive_days=settings.idle_archive_days,
            purge_after_days=settings.purge_after_days,
            deletion_grace_seconds=settings.deletion_grace_seconds,
        ),
        metrics,
    )
    idempotency = None
    if settings.idempotency_table_name:
        from convo_memory.adapters.idempotency import IdempotentRunner

        idempotency = IdempotentRunner(
            settings.idempotency_table_name, dynamodb or aws_client("dynamodb")
        )
    return Container(
        settings=settings,
        stores=stores,
        catalog=catalog,
        runs=RunTraces(stores.runs),
        sessions=SessionService(stores.sessions, stores.turns, catalog, clock),
        turns=turns,
        recorder=recorder,
        summaries=summaries,
        retention=retention,
        tokens=TokenResolver(stores.tokens, settings.cache_ttl_seconds),
        metrics=metrics,
        summary_queue=summary_queue,
        repair_queue=repair_queue,
        idempotency=idempotency,
        adapters=adapters,
        tools=tools,
        clients={"dynamodb": dynamodb, "sqs": clients.get("sqs")},
        turn_limiter=turn_limiter or NoTurnLimit(),
        # The key is read on the first cursor, so functions that never page need none.
        cursors=CursorCodec(
            key_source(
                settings, lambda: clients.get("secretsmanager") or aws_client("secretsmanager")
            )
        ),
    )


def _dynamo_turn_limiter(
    settings: Settings, dynamodb: Any, metrics: MetricsPort, clock: Callable[[], float]
) -> TurnLimiter:
    from convo_memory.adapters.dynamo.table import DynamoTable
    from convo_memory.adapters.dynamo.turn_limiter import DynamoTurnLimiter

    return DynamoTurnLimiter(
        DynamoTable(dynamodb, settings.turn_limits_table_name),
        settings.workspace_turns_per_second,
        metrics,
        clock,
    )


def _sqs_queue(url: str, clients: dict[str, Any]) -> QueuePort | None:
    if not url:
        return None
    from convo_memory.adapters.queues import SqsQueue

    if clients.get("sqs") is None:
        clients["sqs"] = aws_client("sqs")
    return SqsQueue(clients["sqs"], url)


def _adapter_registry(settings: Settings, clients: dict[str, Any]) -> AdapterRegistry:
    """Providers, filters and summarizers over the operator's connections; secrets are
    resolved server-side, Bedrock clients built per region and timeout on first use."""
    from convo_memory.adapters.bedrock_clients import BedrockClients
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.secrets import SecretResolver, build_secrets_client

    def secrets_client(service: str, region: str | None) -> Any:
        return clients.get(service) or build_secrets_client(service, region)

    bedrock_override = clients.get("bedrock-runtime")
    return AdapterRegistry(
        settings.provider_connections,
        timeout_cap_seconds=settings.provider_timeout_cap_seconds,
        secrets=SecretResolver(secrets_client),
        bedrock_clients=BedrockClients(
            None if bedrock_override is None else lambda region, timeout: bedrock_override
        ),
    )


def _tool_adapters(
    settings: Settings,
    clients: dict[str, Any],
    tool_urls: UrlPolicy | None,
    sealer: SecretSealer | None,
) -> ToolAdapters:
    """Webhook calls under the deployment's URL policy (``TOOL_ALLOWED_HOSTS``; tests may
    give their own), and signing secrets sealed with its KMS key (``TOOL_SECRET_KEY_ID``;
    the client is built on first use)."""
    from convo_memory.adapters.tools.sealing import KmsSealer, NoSealer
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.adapters.tools.url_policy import UrlPolicy, parse_allowed_hosts

    policy = tool_urls or UrlPolicy(parse_allowed_hosts(settings.tool_allowed_hosts))
    if sealer is None:
        key_id = settings.tool_secret_key_id
        sealer = (
            KmsSealer(lambda: clients.get("kms") or aws_client("kms"), key_id)
            if key_id
            else NoSealer()
        )
    return ToolAdapters(policy, sealer)


def get_container() -> Container:
    """The container of this Lambda execution environment, built on first use.

    An invalid configuration raises ``SettingsError`` on every call, and is logged once
    per execution environment, naming each bad variable: the handlers answer the
    contract's ``500 internal`` without logging it again."""
    global _container, _settings_failure
    if _container is None:
        with _lock:
            if _container is None:
                if _settings_failure is not None:
                    raise _settings_failure
                try:
                    _container = build_container()
                except SettingsError as exc:
                    _settings_failure = exc
                    logger.error(
                        "%s. This function answers 500 internal until the stack is updated "
                        "with a valid value.",
                        exc,
                    )
                    raise
    return _container


def get_token_resolver() -> TokenResolver:
    """The bearer-token look-up of the HttpApi authorizer.

    It needs only ``TABLE_NAME`` and ``CACHE_TTL_SECONDS``: when another setting is
    invalid it still resolves tokens, so that each route's own function answers the
    contract's ``500 internal`` (and logs the bad variable) instead of every route
    answering API Gateway's bare 500 for a failed authorizer."""
    global _token_resolver
    try:
        return get_container().tokens
    except SettingsError:
        if _token_resolver is None:
            from convo_memory.adapters.dynamo.stores import dynamo_stores
            from convo_memory.config import token_lookup_settings
            from convo_memory.services.auth import TokenResolver

            table_name, cache_ttl_seconds = token_lookup_settings()
            stores = dynamo_stores(aws_client("dynamodb"), table_name, table_name)
            _token_resolver = TokenResolver(stores.tokens, cache_ttl_seconds)
        return _token_resolver


def set_container(container: Container | None) -> None:
    """Replace (or with None, forget) the container: tests and the local runtime."""
    global _container, _settings_failure, _token_resolver
    _container = container
    _settings_failure = None
    _token_resolver = None
