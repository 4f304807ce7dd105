"""The composition root: the one place adapters are built and wired into services.

Two typed steps, as in cosmicpython's ``bootstrap.py``: ``build_adapters(settings,
clients)`` makes every adapter from the deployment's settings, and ``build_services(
adapters, settings, clock)`` wires the services over them. Production calls
``get_container()``: everything is built once per container (cold start), lazily (a
handler imports this module on its first request, and adapters import boto3 on first
use), so importing a handler stays cheap and clients are reused across warm invocations.
The unit tests hand ``build_services`` fake ``Adapters`` (``tests/fakes/app.py``): the
services are wired the same way either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convo_memory.config import Settings, SettingsError
from convo_memory.services.agent_loop import AgentLoop
from convo_memory.services.answering import Answerer
from convo_memory.services.auth import TokenResolver
from convo_memory.services.catalog import CapabilityCatalog, RunTraces
from convo_memory.services.erasures import MAX_QUEUE_DELAY_SECONDS, ErasurePolicy, ErasureService
from convo_memory.services.forks import ForkService
from convo_memory.services.recall import RecallTaker
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.retention import RetentionPolicy, RetentionService
from convo_memory.services.session_keys import SessionKeys
from convo_memory.services.sessions import SessionService
from convo_memory.services.summaries import CHUNK_MESSAGES, SummaryPolicy, SummaryService
from convo_memory.services.summary_trigger import SummaryTrigger
from convo_memory.services.turns import TurnPolicy, TurnService

if TYPE_CHECKING:
    from convo_memory.adapters.aws_clients import AwsClients
    from convo_memory.adapters.idempotency import IdempotentRunner
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.cursors import CursorCodec
    from convo_memory.domain.models import Capability
    from convo_memory.ports import (
        AsyncInvokePort,
        ContentFilter,
        MetricsPort,
        ModelProvider,
        QueuePort,
        Stores,
        Summarizer,
        Toolbox,
        TurnLimiter,
    )

logger = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True)
class Adapters:
    """The outside world behind the ports: what the services are given, and what the
    doors use themselves (cursors, idempotency, the turn limit, metrics)."""

    stores: Stores
    metrics: MetricsPort
    summary_queue: QueuePort | None
    repair_queue: QueuePort | None
    # Erasure jobs and the delayed sweeps of deleted and erased sessions.
    erasure_queue: QueuePort | None
    # The repair function, invoked asynchronously: a turn's path when the queue fails.
    repair_fallback: AsyncInvokePort | None
    turn_limiter: TurnLimiter
    # A capability's model (every call measured), content filter, summarizer and tools.
    provider_for: Callable[[Capability], ModelProvider]
    filter_for: Callable[[Capability], ContentFilter | None]
    summarizer_for: Callable[[Capability], Summarizer]
    toolbox_for: Callable[[Capability], Toolbox]
    tools: ToolAdapters
    registry: AdapterRegistry
    cursors: CursorCodec
    idempotency: IdempotentRunner | None
    clients: AwsClients


@dataclass(frozen=True)
class Container:
    """The services over their adapters: what the handlers call."""

    settings: Settings
    adapters: Adapters
    catalog: CapabilityCatalog
    runs: RunTraces
    sessions: SessionService
    turns: TurnService
    recorder: TurnRecorder
    summaries: SummaryService
    retention: RetentionService
    tokens: TokenResolver
    # Sessions found or opened by an app's own key (the OpenAI-compatible door).
    session_keys: SessionKeys
    erasures: ErasureService
    # Forks (v4): creating them, and the job that copies their older inherited messages.
    forks: ForkService

    # The adapters a door or a test reaches for itself.
    @property
    def stores(self) -> Stores:
        return self.adapters.stores

    @property
    def metrics(self) -> MetricsPort:
        return self.adapters.metrics

    @property
    def summary_queue(self) -> QueuePort | None:
        return self.adapters.summary_queue

    @property
    def turn_limiter(self) -> TurnLimiter:
        return self.adapters.turn_limiter

    @property
    def cursors(self) -> CursorCodec:
        return self.adapters.cursors

    @property
    def idempotency(self) -> IdempotentRunner | None:
        return self.adapters.idempotency

    @property
    def clients(self) -> AwsClients:
        return self.adapters.clients


_lock = threading.Lock()
_container: Container | None = None
# A configuration this execution environment could not load: logged once, then re-raised.
_settings_failure: SettingsError | None = None
_token_resolver: TokenResolver | None = None


def build_container(
    settings: Settings | None = None,
    clients: AwsClients | None = None,
    *,
    clock: Clock = time.time,
    monotonic: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    metrics: MetricsPort | None = None,
) -> Container:
    """The production container: adapters from ``settings`` (default: the environment)
    over ``clients`` (default: built on first use), and the services over them."""
    from convo_memory.adapters.aws_clients import AwsClients

    settings = settings or Settings.from_env()
    adapters = build_adapters(settings, clients or AwsClients(), clock=clock, metrics=metrics)
    return build_services(adapters, settings, clock, monotonic, sleep)


def build_adapters(
    settings: Settings,
    clients: AwsClients,
    *,
    clock: Clock = time.time,
    metrics: MetricsPort | None = None,
) -> Adapters:
    """Every production adapter over ``clients``: DynamoDB stores and turn limit, SQS
    queues, models, filters and summarizers over the operator's connections, webhook
    tools, signed cursors, idempotency. ``metrics`` defaults to the invocation's EMF
    record (``observability.metrics``), which every door flushes."""
    from convo_memory import observability
    from convo_memory.adapters.dynamo.stores import dynamo_stores
    from convo_memory.adapters.metering import metered
    from convo_memory.adapters.registry import summary_provider
    from convo_memory.cursors import CursorCodec, key_source
    from convo_memory.ports import NoTurnLimit

    metrics = metrics or observability.metrics
    registry = _adapter_registry(settings, clients)
    tools = _tool_adapters(settings, clients)
    default_summary = settings.summary_default_provider
    limited = settings.turn_limits_table_name and (
        settings.workspace_turns_per_second > 0 or settings.workspace_max_slow_turns > 0
    )
    return Adapters(
        stores=dynamo_stores(
            clients["dynamodb"],
            settings.table_name,
            settings.runs_table_name,
            settings.idempotency_table_name,
            settings.erasure_receipt_days,
        ),
        metrics=metrics,
        summary_queue=_sqs_queue(settings.summary_queue_url, clients),
        repair_queue=_sqs_queue(settings.repair_queue_url, clients),
        erasure_queue=_sqs_queue(settings.erasure_queue_url, clients),
        repair_fallback=_repair_fallback(settings, clients),
        turn_limiter=(
            _dynamo_turn_limiter(settings, clients["dynamodb"], metrics, clock)
            if limited
            else NoTurnLimit()
        ),
        provider_for=lambda cap: metered(
            registry.provider(cap.provider, cap.kind, cap.tools), metrics, cap.provider.connection
        ),
        filter_for=lambda cap: registry.content_filter(cap.content_filter),
        summarizer_for=lambda cap: registry.summarizer(summary_provider(cap, default_summary)),
        toolbox_for=tools.toolbox,
        tools=tools,
        registry=registry,
        # The key is read on the first cursor, so functions that never page need none.
        cursors=CursorCodec(key_source(settings, lambda: clients["secretsmanager"])),
        idempotency=_idempotency(settings, clients),
        clients=clients,
    )


def build_services(
    adapters: Adapters,
    settings: Settings,
    clock: Clock = time.time,
    monotonic: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Container:
    """The services over ``adapters``, with the deployment's policies from ``settings``
    (``sleep``: the backoff of a failed transcript write or erasure step)."""
    stores, metrics = adapters.stores, adapters.metrics
    catalog = CapabilityCatalog(
        stores.capabilities,
        settings.cache_ttl_seconds,
        connections=settings.provider_connections,
        tool_urls=adapters.tools.policy,
        sealer=adapters.tools.sealer,
        bedrock_available=settings.bedrock_available,
    )
    trigger = SummaryTrigger(
        adapters.summary_queue,
        settings.summary_coalesce_seconds,
        settings.summary_delay_seconds,
        metrics,
        clock,
    )
    recorder = _recorder(adapters, trigger, monotonic, sleep)
    erasures = ErasureService(
        stores.erasures,
        adapters.erasure_queue,
        metrics,
        _erasure_policy(settings),
        clock,
        sleep,
        turns_in_flight=adapters.turn_limiter.turns_in_flight,
    )
    sessions = SessionService(
        stores.sessions,
        stores.turns,
        catalog,
        clock,
        recall=RecallTaker(stores.recall),
        after_delete=erasures.schedule_sweep if adapters.erasure_queue else None,
    )
    session_keys = SessionKeys(sessions, stores.sessions, catalog, sleep)
    return Container(
        settings=settings,
        adapters=adapters,
        catalog=catalog,
        runs=RunTraces(stores.runs),
        sessions=sessions,
        turns=_turn_service(
            adapters, settings, catalog, recorder, trigger, session_keys, clock, monotonic
        ),
        recorder=recorder,
        summaries=_summary_service(adapters, settings, catalog, clock),
        retention=RetentionService(stores.retention, _retention_policy(settings), metrics),
        tokens=TokenResolver(stores.tokens, settings.cache_ttl_seconds),
        session_keys=session_keys,
        erasures=erasures,
        forks=ForkService(
            stores.sessions,
            stores.forks,
            catalog,
            clock,
            copy_queue=adapters.erasure_queue,
            summarize=trigger.after_fork,
            metrics=metrics,
        ),
    )


def table_stores(table_name: str, clients: AwsClients) -> Stores:
    """The stores of the conversations table alone (tokens, capabilities): what the
    operator CLI and the authorizer's fallback need."""
    from convo_memory.adapters.dynamo.stores import dynamo_stores

    return dynamo_stores(clients["dynamodb"], table_name, table_name)


# -- the parts ---------------------------------------------------------------------------


def _recorder(
    adapters: Adapters, trigger: SummaryTrigger, monotonic: Clock, sleep: Callable[[float], None]
) -> TurnRecorder:
    """Records each turn once: retried within the turn, then the repair queue, then the
    repair function invoked asynchronously."""
    return TurnRecorder(
        adapters.stores.turns,
        adapters.stores.sessions,
        adapters.repair_queue,
        adapters.metrics,
        after_repair=trigger.after_repair,
        repair_fallback=adapters.repair_fallback,
        monotonic=monotonic,
        sleep=sleep,
    )


def _summary_service(
    adapters: Adapters, settings: Settings, catalog: CapabilityCatalog, clock: Clock
) -> SummaryService:
    return SummaryService(
        sessions=adapters.stores.sessions,
        turns=adapters.stores.turns,
        summaries=adapters.stores.summaries,
        catalog=catalog,
        summarizer_for=adapters.summarizer_for,
        policy=_summary_policy(settings),
        metrics=adapters.metrics,
        clock=clock,
    )


def _turn_service(
    adapters: Adapters,
    settings: Settings,
    catalog: CapabilityCatalog,
    recorder: TurnRecorder,
    trigger: SummaryTrigger,
    session_keys: SessionKeys,
    clock: Clock,
    monotonic: Clock,
) -> TurnService:
    """The serving path: a capability's model (or agent loop), filter and tools."""
    answerer = Answerer(
        adapters.provider_for,
        adapters.filter_for,
        adapters.stores.runs,
        adapters.metrics,
        toolbox_for=adapters.toolbox_for,
        loop=AgentLoop(tool_timeout_seconds=settings.tool_timeout_seconds, monotonic=monotonic),
        monotonic=monotonic,
    )
    return TurnService(
        catalog=catalog,
        sessions=adapters.stores.sessions,
        turns=adapters.stores.turns,
        answerer=answerer,
        recorder=recorder,
        trigger=trigger,
        keys=session_keys,
        policy=_turn_policy(settings),
        clock=clock,
        monotonic=monotonic,
    )


def _turn_policy(settings: Settings) -> TurnPolicy:
    return TurnPolicy(
        max_input_chars=settings.max_input_chars,
        max_stored_answer_chars=settings.max_stored_answer_chars,
        digest_max_chars=settings.digest_max_chars,
        digest_retention_seconds=settings.digest_retention_hours * 3600,
        activity_granularity_seconds=settings.activity_granularity_seconds,
        turn_deadline_seconds=settings.turn_deadline_seconds,
    )


def _summary_policy(settings: Settings) -> SummaryPolicy:
    return SummaryPolicy(
        batch_turns=settings.summary_batch_turns,
        # A steady conversation's batch is always one summarizer call.
        chunk_messages=max(CHUNK_MESSAGES, 2 * settings.summary_batch_turns),
    )


def _retention_policy(settings: Settings) -> RetentionPolicy:
    return RetentionPolicy(
        idle_archive_days=settings.idle_archive_days,
        purge_after_days=settings.purge_after_days,
        deletion_grace_seconds=settings.deletion_grace_seconds,
    )


def _erasure_policy(settings: Settings) -> ErasurePolicy:
    # A deletion's sweep runs once no write in flight can land: DeletionGraceSeconds (at
    # least 360 s, longer than any function runs) or SQS's longest delay, 900 s.
    delay = min(MAX_QUEUE_DELAY_SECONDS, int(settings.deletion_grace_seconds))
    return ErasurePolicy(sweep_delay_seconds=delay, turn_budget_seconds=_turn_lifetime(settings))


def _dynamo_turn_limiter(
    settings: Settings, dynamodb: Any, metrics: MetricsPort, clock: Callable[[], float]
) -> TurnLimiter:
    """The rate limit and the slow-turn cap, on one item per workspace (either may be
    off, not both)."""
    from convo_memory.adapters.dynamo.rate_limit import (
        COUNTER_TTL_SECONDS,
        RateLimit,
        WorkspaceRateLimiter,
    )
    from convo_memory.adapters.dynamo.slow_turns import SlowTurnCap, SlowTurnLimiter, SlowTurns
    from convo_memory.adapters.dynamo.table import DynamoTable

    table = DynamoTable(dynamodb, settings.turn_limits_table_name)
    rated = settings.workspace_turns_per_second > 0
    lifetime = _turn_lifetime(settings)
    slow = None
    if settings.workspace_max_slow_turns > 0:
        slow = SlowTurns(
            table,
            SlowTurnCap(settings.workspace_max_slow_turns, lifetime),
            metrics,
            clock,
            item_expiry_seconds=lifetime + COUNTER_TTL_SECONDS,
            sets_item_expiry=not rated,
        )
    if not rated:
        assert slow is not None
        return SlowTurnLimiter(slow)
    return WorkspaceRateLimiter(
        table,
        RateLimit(settings.workspace_turns_per_second, settings.workspace_turn_burst),
        metrics,
        clock,
        slow,
        min_item_seconds=lifetime if slow is not None else 0,
    )


def _turn_lifetime(settings: Settings) -> float:
    """The longest a turn runs and writes: a streamed one's deadline, then its recording."""
    from convo_memory.time_budget import RECORDING_MARGIN_SECONDS

    return (
        max(settings.turn_deadline_seconds, settings.stream_turn_deadline_seconds)
        + RECORDING_MARGIN_SECONDS
    )


def _repair_fallback(settings: Settings, clients: AwsClients) -> AsyncInvokePort | None:
    """The repair function, invoked asynchronously: the path a turn takes when the
    repair queue does not take it (its client is built on first use)."""
    if not settings.repair_function_name:
        return None
    from convo_memory.adapters.lambda_invoke import LambdaAsyncInvoke

    return LambdaAsyncInvoke(lambda: clients["lambda"], settings.repair_function_name)


def _sqs_queue(url: str, clients: AwsClients) -> QueuePort | None:
    if not url:
        return None
    from convo_memory.adapters.queues import SqsQueue

    return SqsQueue(clients["sqs"], url)


def _adapter_registry(settings: Settings, clients: AwsClients) -> AdapterRegistry:
    """Providers, filters and summarizers over the operator's connections; secrets are
    resolved server-side, Bedrock clients built per region and timeout on first use, and
    prompt-cache keys derived from the deployment's cursor key."""
    from convo_memory.adapters.cache_keys import PromptCacheKeys
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.secrets import SecretResolver
    from convo_memory.cursors import key_source

    return AdapterRegistry(
        settings.provider_connections,
        timeout_cap_seconds=settings.provider_timeout_cap_seconds,
        secrets=SecretResolver(clients.secrets),
        bedrock_clients=clients.bedrock_runtime,
        # Keyed by the cursor key (read on the first key a container sends).
        cache_keys=PromptCacheKeys(key_source(settings, lambda: clients["secretsmanager"])),
    )


def _tool_adapters(settings: Settings, clients: AwsClients) -> ToolAdapters:
    """Webhook calls under the deployment's URL policy (``TOOL_ALLOWED_HOSTS``), and
    signing secrets sealed with its KMS key (``TOOL_SECRET_KEY_ID``; the client is built
    on first use)."""
    from convo_memory.adapters.tools.sealing import KmsSealer, NoSealer
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.adapters.tools.url_policy import UrlPolicy, parse_allowed_hosts

    key_id = settings.tool_secret_key_id
    sealer = KmsSealer(lambda: clients["kms"], key_id) if key_id else NoSealer()
    return ToolAdapters(UrlPolicy(parse_allowed_hosts(settings.tool_allowed_hosts)), sealer)


def _idempotency(settings: Settings, clients: AwsClients) -> IdempotentRunner | None:
    if not settings.idempotency_table_name:
        return None
    from convo_memory.adapters.idempotency import IdempotentRunner

    return IdempotentRunner(settings.idempotency_table_name, clients["dynamodb"])


# -- once per execution environment -------------------------------------------------------


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
            from convo_memory.adapters.aws_clients import AwsClients
            from convo_memory.config import token_lookup_settings

            table_name, cache_ttl_seconds = token_lookup_settings()
            stores = table_stores(table_name, AwsClients())
            _token_resolver = TokenResolver(stores.tokens, cache_ttl_seconds)
        return _token_resolver


def set_container(container: Container | None) -> None:
    """Replace (or with None, forget) the container: tests and the local runtime."""
    global _container, _settings_failure, _token_resolver
    _container = container
    _settings_failure = None
    _token_resolver = None
