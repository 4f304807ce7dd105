"""How each production adapter is built over the process's boto3 clients
(``AwsClients``), from the deployment's settings that the composition root
(``convo_memory.bootstrap``) hands it. Each builder imports its adapter on use, and a
client is built on its first call, so a function pays only for what it uses."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from convo_memory.adapters.aws_clients import AwsClients
    from convo_memory.adapters.dynamo.rate_limit import RateLimit
    from convo_memory.adapters.idempotency import IdempotentRunner
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.domain.connections import ProviderConnections
    from convo_memory.ports import (
        AsyncInvokePort,
        AttachmentStore,
        FileFetcher,
        FileStore,
        MetricsPort,
        OwnerKeys,
        QueuePort,
        Stores,
        TurnLimiter,
    )


def adapter_registry(
    connections: ProviderConnections,
    timeout_cap_seconds: float,
    cursor_key: Callable[[], bytes],
    clients: AwsClients,
) -> AdapterRegistry:
    """Providers, filters and summarizers over the operator's connections; secrets are
    resolved server-side, Bedrock clients built per region and timeout on first use, and
    prompt-cache keys derived from the deployment's cursor key (read on the first key a
    container sends)."""
    from convo_memory.adapters.cache_keys import PromptCacheKeys
    from convo_memory.adapters.registry import AdapterRegistry
    from convo_memory.adapters.secrets import SecretResolver

    return AdapterRegistry(
        connections,
        timeout_cap_seconds=timeout_cap_seconds,
        secrets=SecretResolver(clients.secrets),
        bedrock_clients=clients.bedrock_runtime,
        cache_keys=PromptCacheKeys(cursor_key),
    )


def tool_adapters(
    allowed_hosts: Sequence[str], secret_key_id: str, clients: AwsClients
) -> ToolAdapters:
    """Webhook calls under the deployment's URL policy (``TOOL_ALLOWED_HOSTS``), and
    signing secrets sealed with its KMS key (``TOOL_SECRET_KEY_ID``; none: no webhooks)."""
    from convo_memory.adapters.tools.sealing import KmsSealer, NoSealer
    from convo_memory.adapters.tools.toolbox import ToolAdapters
    from convo_memory.adapters.tools.url_policy import UrlPolicy
    from convo_memory.domain.allowed_hosts import parse_allowed_hosts

    sealer = KmsSealer(lambda: clients["kms"], secret_key_id) if secret_key_id else NoSealer()
    return ToolAdapters(UrlPolicy(parse_allowed_hosts(allowed_hosts)), sealer)


class BucketSettings(Protocol):
    @property
    def table_name(self) -> str: ...
    @property
    def attachments_bucket(self) -> str: ...


def attachment_stores(
    settings: BucketSettings, clients: AwsClients
) -> tuple[AttachmentStore | None, FileStore | None]:
    """(v5) Conversations' attachments and the workspace's uploads in the deployment's
    bucket (``ATTACHMENTS_BUCKET``; none: nothing is stored). The S3 client is built on
    the first object a function reads or writes, never at cold start."""
    if not settings.attachments_bucket:
        return None, None
    from convo_memory.adapters.attachments.bucket import Bucket
    from convo_memory.adapters.attachments.store import S3AttachmentStore
    from convo_memory.adapters.attachments.uploads import S3FileStore
    from convo_memory.adapters.dynamo.table import DynamoTable

    table = DynamoTable(clients["dynamodb"], settings.table_name)
    bucket = Bucket(lambda: clients["s3"], settings.attachments_bucket)
    return S3AttachmentStore(table, bucket), S3FileStore(table, bucket)


def file_fetcher(allowed_hosts: Sequence[str]) -> FileFetcher:
    """(v5) An attachment's URL, fetched once under the webhook tools' URL policy."""
    from convo_memory.adapters.attachments.fetch import UrlFetcher
    from convo_memory.adapters.tools.url_policy import UrlPolicy
    from convo_memory.domain.allowed_hosts import parse_allowed_hosts

    return UrlFetcher(UrlPolicy(parse_allowed_hosts(allowed_hosts)))


def owner_keys(secret: Callable[[], bytes]) -> OwnerKeys:
    """(v5) End users' attachments named by a keyed hash under the deployment's secret
    (the cursor key's, read on the first name a container needs)."""
    from convo_memory.adapters.attachments.owners import HmacOwnerKeys

    return HmacOwnerKeys(secret)


def sqs_queue(url: str, clients: AwsClients) -> QueuePort | None:
    """The queue at ``url`` (None: the deployment has none)."""
    if not url:
        return None
    from convo_memory.adapters.queues import SqsQueue

    return SqsQueue(clients["sqs"], url)


def repair_fallback(function_name: str, clients: AwsClients) -> AsyncInvokePort | None:
    """The repair function, invoked asynchronously: the path a turn takes when the
    repair queue does not take it."""
    if not function_name:
        return None
    from convo_memory.adapters.lambda_invoke import LambdaAsyncInvoke

    return LambdaAsyncInvoke(lambda: clients["lambda"], function_name)


class StoreSettings(Protocol):
    """What the stores are built from: the deployment's settings (``config.Settings``),
    read here without importing them."""

    @property
    def table_name(self) -> str: ...
    @property
    def runs_table_name(self) -> str: ...
    @property
    def idempotency_table_name(self) -> str: ...
    @property
    def erasure_receipt_days(self) -> float: ...
    @property
    def turn_limits_table_name(self) -> str: ...
    @property
    def workspace_turns_per_second(self) -> float: ...
    @property
    def workspace_turn_burst(self) -> int: ...
    @property
    def workspace_max_slow_turns(self) -> int: ...
    @property
    def turn_lifetime(self) -> float: ...


def stores(settings: StoreSettings, clients: AwsClients) -> Stores:
    """Every store over the stack's DynamoDB tables."""
    from convo_memory.adapters.dynamo.stores import dynamo_stores

    return dynamo_stores(
        clients["dynamodb"],
        settings.table_name,
        settings.runs_table_name,
        settings.idempotency_table_name,
        settings.erasure_receipt_days,
    )


def turn_limiter(
    settings: StoreSettings, clients: AwsClients, metrics: MetricsPort, clock: Callable[[], float]
) -> TurnLimiter:
    """The workspace's turn rate (turns a second and burst) and its cap of slow turns in
    flight, on shards sized from them (``adapters/dynamo/limiter_layout.py``); none when
    both are off (0) or there is no table. A turn runs and writes for at most the
    settings' ``turn_lifetime``."""
    from convo_memory.ports import NoTurnLimit

    table_name, turn_lifetime = settings.turn_limits_table_name, settings.turn_lifetime
    turns_per_second, burst = settings.workspace_turns_per_second, settings.workspace_turn_burst
    max_slow_turns = settings.workspace_max_slow_turns
    rated = turns_per_second > 0
    if not table_name or not (rated or max_slow_turns > 0):
        return NoTurnLimit()
    from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
    from convo_memory.adapters.dynamo.slow_turns import SlowTurnCap, SlowTurnLimiter, SlowTurns
    from convo_memory.adapters.dynamo.table import DynamoTable

    table = DynamoTable(clients["dynamodb"], table_name)
    limit = RateLimit(turns_per_second, burst) if rated else None
    slow = None
    if max_slow_turns > 0:
        slow = SlowTurns(
            table,
            SlowTurnCap(max_slow_turns, turn_lifetime),
            metrics,
            clock,
            item_expiry_seconds=item_lifetime(limit, turn_lifetime),
            rate=turns_per_second if rated else 0,
        )
    if limit is None:
        assert slow is not None
        return SlowTurnLimiter(slow)
    return WorkspaceRateLimiter(
        table, limit, metrics, clock, slow, min_item_seconds=turn_lifetime if slow else 0
    )


def item_lifetime(limit: RateLimit | None, turn_lifetime: float) -> float:
    """How long a limiter item outlives its last write when it holds slow turns: the
    longest a turn runs or a rate shard drains, then a minute (what both kinds of write
    set, so that neither shortens the other's)."""
    from convo_memory.adapters.dynamo.limiter_layout import LimiterLayout
    from convo_memory.adapters.dynamo.rate_limit import COUNTER_TTL_SECONDS, RateLimit

    drained = 0.0
    if limit is not None:
        layout = LimiterLayout(limit.rate, limit.burst)
        shard = RateLimit(layout.shard_rate, layout.shard_burst)
        drained = math.ceil((shard.tolerance_us + shard.interval_us) / 1_000_000)
    return max(math.ceil(turn_lifetime), drained) + COUNTER_TTL_SECONDS


def idempotency(table_name: str, clients: AwsClients) -> IdempotentRunner | None:
    """Idempotency-Key records in ``table_name`` (None: the deployment keeps none)."""
    if not table_name:
        return None
    from convo_memory.adapters.idempotency import IdempotentRunner

    return IdempotentRunner(table_name, clients["dynamodb"])


def table_stores(table_name: str, clients: AwsClients) -> Stores:
    """The stores of the conversations table alone (tokens, capabilities): what the
    operator CLI and the authorizer's fallback need."""
    from convo_memory.adapters.dynamo.stores import dynamo_stores

    return dynamo_stores(clients["dynamodb"], table_name, table_name)
