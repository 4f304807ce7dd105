"""The composition root: the one place adapters are built and wired into services.

Two typed steps, as in cosmicpython's ``bootstrap.py``: ``build_adapters(settings,
clients)`` makes every adapter (as ``adapters/production.py`` builds each), and
``build_services(adapters, settings, clock)`` wires the services over them, once per
execution environment over the process's one ``AwsClients``
(``convo_memory.execution_environment``), lazily: importing a handler stays cheap, and
clients are reused across warm invocations. The unit tests hand ``build_services`` fake
``Adapters`` (``tests/fakes/app.py``): the services are wired the same way either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convo_memory.config import Settings
from convo_memory.services.agent_loop import AgentLoop
from convo_memory.services.answering import Answerer
from convo_memory.services.auth import TokenResolver
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.conversations import ConversationService
from convo_memory.services.erasures import ErasureService
from convo_memory.services.forks import ForkService
from convo_memory.services.recall import RecallTaker
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.responses import ResponseService
from convo_memory.services.retention import RetentionService
from convo_memory.services.runs import RunTraces
from convo_memory.services.session_keys import SessionKeys
from convo_memory.services.sessions import SessionService
from convo_memory.services.summaries import SummaryService
from convo_memory.services.summary_trigger import SummaryTrigger
from convo_memory.services.turns import TurnService

if TYPE_CHECKING:
    from convo_memory import ports
    from convo_memory.adapters.aws_clients import AwsClients
    from convo_memory.adapters.cursors import CursorCodec
    from convo_memory.adapters.idempotency import IdempotentRunner
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.domain.models import Capability

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Adapters:
    """The outside world behind the ports: what the services are given, and what the
    doors use themselves (cursors, idempotency, the turn limit, metrics)."""

    stores: ports.Stores
    metrics: ports.MetricsPort
    summary_queue: ports.QueuePort | None
    repair_queue: ports.QueuePort | None
    # Erasure jobs and the delayed sweeps of deleted and erased sessions.
    erasure_queue: ports.QueuePort | None
    # The repair function, invoked asynchronously: a turn's path when the queue fails.
    repair_fallback: ports.AsyncInvokePort | None
    turn_limiter: ports.TurnLimiter
    # A capability's model (every call measured), content filter, summarizer and tools.
    provider_for: Callable[[Capability], ports.ModelProvider]
    filter_for: Callable[[Capability], ports.ContentFilter | None]
    summarizer_for: Callable[[Capability], ports.Summarizer]
    toolbox_for: Callable[[Capability], ports.Toolbox]
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
    # (v4) Conversations (the Responses door's and /v1/conversations) and stored responses.
    conversations: ConversationService
    responses: ResponseService


def build_adapters(
    settings: Settings,
    clients: AwsClients,
    *,
    clock: Clock = time.time,
    metrics: ports.MetricsPort | None = None,
) -> Adapters:
    """Every production adapter over ``clients``; ``metrics`` defaults to the invocation's
    EMF record (``observability.metrics``), which every door flushes."""
    from convo_memory import observability
    from convo_memory.adapters import production
    from convo_memory.adapters.cursors import CursorCodec, key_source
    from convo_memory.adapters.metering import metered
    from convo_memory.adapters.registry import summary_provider

    metrics = metrics or observability.metrics
    cursor_key = key_source(settings, lambda: clients["secretsmanager"])  # read on first use
    registry = production.adapter_registry(
        settings.provider_connections, settings.provider_timeout_cap_seconds, cursor_key, clients
    )
    tools = production.tool_adapters(
        settings.tool_allowed_hosts, settings.tool_secret_key_id, clients
    )
    default_summary = settings.summary_default_provider
    return Adapters(
        stores=production.stores(settings, clients),
        metrics=metrics,
        summary_queue=production.sqs_queue(settings.summary_queue_url, clients),
        repair_queue=production.sqs_queue(settings.repair_queue_url, clients),
        erasure_queue=production.sqs_queue(settings.erasure_queue_url, clients),
        repair_fallback=production.repair_fallback(settings.repair_function_name, clients),
        turn_limiter=production.turn_limiter(settings, clients, metrics, clock),
        provider_for=lambda cap: metered(
            registry.provider(cap.provider, cap.kind, cap.tools), metrics, cap.provider.connection
        ),
        filter_for=lambda cap: registry.content_filter(cap.content_filter),
        summarizer_for=lambda cap: registry.summarizer(summary_provider(cap, default_summary)),
        toolbox_for=tools.toolbox,
        tools=tools,
        registry=registry,
        # The key signs cursors and keys prompt caches: functions that do neither read none.
        cursors=CursorCodec(cursor_key),
        idempotency=production.idempotency(settings.idempotency_table_name, clients),
        clients=clients,
    )


def build_services(
    adapters: Adapters,
    settings: Settings,
    clock: Clock = time.time,
    monotonic: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
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
    trigger, recorder = _recording(adapters, settings, clock, monotonic, sleep)
    erasures = _erasures(adapters, settings, clock, sleep)
    sessions = SessionService(
        stores.sessions,
        stores.turns,
        catalog,
        clock,
        recall=RecallTaker(stores.recall),
        after_delete=erasures.schedule_sweep if adapters.erasure_queue else None,
    )
    keys = SessionKeys(sessions, stores.sessions, catalog, sleep)
    forks = _forks(adapters, catalog, trigger, clock)
    conversations = ConversationService(
        sessions, stores.turns, stores.responses, forks, settings.import_limits(), clock
    )
    parts = (recorder, trigger, keys, conversations)
    return Container(
        settings=settings,
        adapters=adapters,
        catalog=catalog,
        runs=RunTraces(stores.runs),
        sessions=sessions,
        turns=_turns(adapters, settings, catalog, parts, clock, monotonic),
        recorder=recorder,
        summaries=_summaries(adapters, settings, catalog, clock),
        retention=RetentionService(stores.retention, settings.retention_policy(), metrics),
        tokens=TokenResolver(stores.tokens, settings.cache_ttl_seconds),
        session_keys=keys,
        erasures=erasures,
        forks=forks,
        conversations=conversations,
        responses=ResponseService(stores.responses, sessions),
    )


def _recording(
    adapters: Adapters, settings: Settings, clock: Clock, monotonic: Clock, sleep: Sleep
) -> tuple[SummaryTrigger, TurnRecorder]:
    """What asks for summaries after turns, and what records turns (or hands them over)."""
    metrics = adapters.metrics
    timing = (settings.summary_coalesce_seconds, settings.summary_delay_seconds)
    trigger = SummaryTrigger(adapters.summary_queue, *timing, metrics, clock)
    recorder = TurnRecorder(
        adapters.stores.turns,
        adapters.stores.sessions,
        adapters.repair_queue,
        metrics,
        after_repair=trigger.after_repair,
        repair_fallback=adapters.repair_fallback,
        monotonic=monotonic,
        sleep=sleep,
    )
    return trigger, recorder


def _turns(
    adapters: Adapters,
    settings: Settings,
    catalog: CapabilityCatalog,
    parts: tuple[TurnRecorder, SummaryTrigger, SessionKeys, ConversationService],
    clock: Clock,
    monotonic: Clock,
) -> TurnService:
    """The serving path: a capability's model (or agent loop), filter and tools."""
    recorder, trigger, keys, conversations = parts
    answerer = Answerer(
        adapters.provider_for,
        adapters.filter_for,
        adapters.stores.runs,
        adapters.metrics,
        toolbox_for=adapters.toolbox_for,
        loop=AgentLoop(tool_timeout_seconds=settings.tool_timeout_seconds, monotonic=monotonic),
        monotonic=monotonic,
    )
    stores = adapters.stores
    return TurnService(
        catalog=catalog,
        sessions=stores.sessions,
        turns=stores.turns,
        answerer=answerer,
        recorder=recorder,
        trigger=trigger,
        keys=keys,
        conversations=conversations,
        policy=settings.turn_policy(),
        clock=clock,
        monotonic=monotonic,
        metrics=adapters.metrics,
    )


def _erasures(
    adapters: Adapters, settings: Settings, clock: Clock, sleep: Callable[[float], None]
) -> ErasureService:
    """End users' erasures and deleted sessions' sweeps, which wait out turns in flight."""
    return ErasureService(
        adapters.stores.erasures,
        adapters.erasure_queue,
        adapters.metrics,
        settings.erasure_policy(),
        clock,
        sleep,
        turns_in_flight=adapters.turn_limiter.turns_in_flight,
    )


def _forks(
    adapters: Adapters, catalog: CapabilityCatalog, trigger: SummaryTrigger, clock: Clock
) -> ForkService:
    """Forks, and the job (on the erasure queue) that copies their older messages in."""
    return ForkService(
        adapters.stores.sessions,
        adapters.stores.forks,
        catalog,
        clock,
        copy_queue=adapters.erasure_queue,
        summarize=trigger.after_fork,
        metrics=adapters.metrics,
    )


def _summaries(
    adapters: Adapters, settings: Settings, catalog: CapabilityCatalog, clock: Clock
) -> SummaryService:
    stores = adapters.stores
    return SummaryService(
        sessions=stores.sessions,
        turns=stores.turns,
        summaries=stores.summaries,
        catalog=catalog,
        summarizer_for=adapters.summarizer_for,
        policy=settings.summary_policy(),
        metrics=adapters.metrics,
        clock=clock,
    )
