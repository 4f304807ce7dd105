"""The outside world, built: every adapter the services are given (``Adapters``, ports
only), and the concrete pieces the edge and the operator use beside them
(``Infrastructure``), each built as ``adapters/production.py`` says over the process's
clients."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convo_memory.config import Settings

if TYPE_CHECKING:
    from convo_memory import ports
    from convo_memory.adapters.aws_clients import AwsClients
    from convo_memory.adapters.cursors import CursorCodec
    from convo_memory.adapters.idempotency import IdempotentRunner
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.domain.models import Capability

Clock = Callable[[], float]


@dataclass(frozen=True)
class Adapters:
    """The outside world behind the ports: what the services are given."""

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
    # Where webhook tools may be called, and how their signing secrets are kept.
    tool_urls: ports.ToolUrlPolicy
    sealer: ports.SecretSealer
    # New forks' copies of their older inherited messages (``ForkCopyJob``).
    fork_copy_queue: ports.QueuePort | None = None
    # (v5) Images and files: conversations' attachments and the workspace's uploads (None
    # without a bucket), URLs fetched once, and the keyed names of end users' attachments.
    attachments: ports.AttachmentStore | None = None
    files: ports.FileStore | None = None
    file_fetcher: ports.FileFetcher | None = None
    owner_keys: ports.OwnerKeys | None = None


@dataclass(frozen=True)
class Infrastructure:
    """What the edge and the operator use beside the services' ports: signed cursors,
    the Idempotency-Key runner, the operator's connections and the process's clients."""

    cursors: CursorCodec
    idempotency: IdempotentRunner | None
    registry: AdapterRegistry
    clients: AwsClients


def build_adapters(
    settings: Settings,
    clients: AwsClients,
    *,
    clock: Clock = time.time,
    metrics: ports.MetricsPort | None = None,
) -> tuple[Adapters, Infrastructure]:
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
    attachments, files = production.attachment_stores(settings, clients)
    adapters = Adapters(
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
        tool_urls=tools.policy,
        sealer=tools.sealer,
        fork_copy_queue=production.sqs_queue(settings.fork_copy_queue_url, clients),
        attachments=attachments,
        files=files,
        file_fetcher=production.file_fetcher(settings.tool_allowed_hosts),
        owner_keys=production.owner_keys(cursor_key),
    )
    # The key signs cursors and keys prompt caches: functions that do neither read none.
    cursors = CursorCodec(cursor_key)
    idempotency = production.idempotency(settings.idempotency_table_name, clients)
    return adapters, Infrastructure(cursors, idempotency, registry, clients)
