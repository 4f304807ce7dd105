"""The composition root: the one place adapters are built and wired into services.

Everything is built lazily, once per container (cold start), so that importing a
handler stays cheap and clients are reused across warm invocations.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from convo_memory.config import Settings


@dataclass
class Container:
    settings: Settings
    store: Any
    catalog: Any
    sessions: Any
    turns: Any
    tokens: Any
    summary_queue: Any
    repair_queue: Any
    metrics: Any
    idempotency: Any = None
    adapters: Any = None
    cursors: Any = None
    clients: dict[str, Any] = field(default_factory=dict)


_lock = threading.Lock()
_container: Container | None = None


def _client(service: str, **config: Any) -> Any:
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


def build_container(settings: Settings | None = None, **clients: Any) -> Container:
    """Wire the services. ``clients`` may override ``dynamodb``, ``sqs`` and
    ``bedrock-runtime`` (tests inject moto-backed or stubbed clients)."""
    from convo_memory.adapters.dynamo_store import DynamoStore
    from convo_memory.adapters.idempotency import IdempotentRunner
    from convo_memory.adapters.metrics import PowertoolsMetrics
    from convo_memory.adapters.providers.factory import AdapterCache
    from convo_memory.adapters.queues import SqsQueue
    from convo_memory.cursors import CursorCodec, key_source
    from convo_memory.services.admin import TokenResolver
    from convo_memory.services.catalog import CapabilityCatalog
    from convo_memory.services.sessions import SessionService
    from convo_memory.services.turns import TurnPolicy, TurnService

    settings = settings or Settings.from_env()
    dynamodb = clients.get("dynamodb") or _client("dynamodb")
    sqs = clients.get("sqs")
    if sqs is None and (settings.summary_queue_url or settings.repair_queue_url):
        sqs = _client("sqs")
    bedrock_clients: dict[str | None, Any] = {}

    def bedrock_client(region: str | None = None) -> Any:
        # Only capabilities that use Bedrock pay for creating its client.
        if region not in bedrock_clients:
            bedrock_clients[region] = clients.get("bedrock-runtime") or _client(
                "bedrock-runtime", read_timeout=120, region_name=region
            )
        return bedrock_clients[region]

    store = DynamoStore(dynamodb, settings.table_name, settings.runs_table_name)
    catalog = CapabilityCatalog(store, settings.cache_ttl_seconds)
    summary_queue = (
        SqsQueue(sqs, settings.summary_queue_url) if settings.summary_queue_url else None
    )
    repair_queue = SqsQueue(sqs, settings.repair_queue_url) if settings.repair_queue_url else None
    metrics = PowertoolsMetrics()
    adapters = AdapterCache(bedrock_client_factory=bedrock_client)
    turns = TurnService(
        store=store,
        catalog=catalog,
        provider_for=lambda cap: adapters.provider(cap.provider, cap.kind, cap.tools),
        filter_for=lambda cap: adapters.content_filter(cap.content_filter),
        summary_queue=summary_queue,
        repair_queue=repair_queue,
        policy=TurnPolicy(
            max_input_chars=settings.max_input_chars,
            digest_max_chars=settings.digest_max_chars,
            digest_retention_seconds=settings.digest_retention_hours * 3600,
            summary_coalesce_seconds=settings.summary_coalesce_seconds,
            summary_delay_seconds=settings.summary_delay_seconds,
        ),
        metrics=metrics,
    )
    return Container(
        settings=settings,
        store=store,
        catalog=catalog,
        sessions=SessionService(store, catalog),
        turns=turns,
        tokens=TokenResolver(store, settings.cache_ttl_seconds),
        summary_queue=summary_queue,
        repair_queue=repair_queue,
        metrics=metrics,
        adapters=adapters,
        idempotency=(
            IdempotentRunner(settings.idempotency_table_name, dynamodb)
            if settings.idempotency_table_name
            else None
        ),
        clients={"dynamodb": dynamodb, "sqs": sqs},
        # The key is read on the first cursor, so functions that never page need none.
        cursors=CursorCodec(
            key_source(settings, lambda: clients.get("secretsmanager") or _client("secretsmanager"))
        ),
    )


def get_container() -> Container:
    """The container of this Lambda execution environment, built on first use."""
    global _container
    if _container is None:
        with _lock:
            if _container is None:
                _container = build_container()
    return _container


def set_container(container: Container | None) -> None:
    """Replace (or with None, forget) the container: tests and the local runtime."""
    global _container
    _container = container
