"""All the DynamoDB stores over the stack's two tables (the composition root's entry)."""

from __future__ import annotations

from typing import Any

from convo_memory.adapters.dynamo.capabilities import DynamoCapabilityStore
from convo_memory.adapters.dynamo.recall import DynamoRecallStore
from convo_memory.adapters.dynamo.retention import DynamoRetentionStore
from convo_memory.adapters.dynamo.runs import DynamoRunStore
from convo_memory.adapters.dynamo.sessions import DynamoSessionStore
from convo_memory.adapters.dynamo.summaries import DynamoSummaryStore
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.adapters.dynamo.tokens import DynamoTokenStore
from convo_memory.adapters.dynamo.turns import DynamoTurnStore
from convo_memory.ports import Stores


def dynamo_stores(client: Any, table_name: str, runs_table_name: str) -> Stores:
    """Every store over one DynamoDB client and the stack's two tables."""
    table = DynamoTable(client, table_name)
    return Stores(
        tokens=DynamoTokenStore(table),
        capabilities=DynamoCapabilityStore(table),
        sessions=DynamoSessionStore(table),
        turns=DynamoTurnStore(table),
        summaries=DynamoSummaryStore(table),
        retention=DynamoRetentionStore(table),
        runs=DynamoRunStore(DynamoTable(client, runs_table_name)),
        recall=DynamoRecallStore(table),
    )
