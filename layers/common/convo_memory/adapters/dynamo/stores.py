"""All the DynamoDB stores over the stack's tables (the composition root's entry)."""

from __future__ import annotations

from typing import Any

from convo_memory.adapters.dynamo.capabilities import DynamoCapabilityStore
from convo_memory.adapters.dynamo.erasures import DynamoErasureStore
from convo_memory.adapters.dynamo.forks import DynamoForkStore
from convo_memory.adapters.dynamo.recall import DynamoRecallStore
from convo_memory.adapters.dynamo.responses import DynamoResponseStore
from convo_memory.adapters.dynamo.retention import DynamoRetentionStore
from convo_memory.adapters.dynamo.runs import DynamoRunStore
from convo_memory.adapters.dynamo.sessions import DynamoSessionStore
from convo_memory.adapters.dynamo.summaries import DynamoSummaryStore
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.adapters.dynamo.tokens import DynamoTokenStore
from convo_memory.adapters.dynamo.turns import DynamoTurnStore
from convo_memory.ports import Stores


def dynamo_stores(
    client: Any,
    table_name: str,
    runs_table_name: str,
    idempotency_table_name: str = "",
    erasure_receipt_days: float = 30,
) -> Stores:
    """Every store over one DynamoDB client and the stack's tables (an erasure removes
    the idempotency records of its turns when there is an idempotency table)."""
    table = DynamoTable(client, table_name)
    runs = DynamoTable(client, runs_table_name)
    idempotency = DynamoTable(client, idempotency_table_name) if idempotency_table_name else None
    return Stores(
        tokens=DynamoTokenStore(table),
        capabilities=DynamoCapabilityStore(table),
        sessions=DynamoSessionStore(table),
        turns=DynamoTurnStore(table),
        summaries=DynamoSummaryStore(table),
        retention=DynamoRetentionStore(table),
        runs=DynamoRunStore(runs),
        recall=DynamoRecallStore(table),
        erasures=DynamoErasureStore(table, runs, idempotency, erasure_receipt_days),
        forks=DynamoForkStore(table),
        responses=DynamoResponseStore(table),
    )
