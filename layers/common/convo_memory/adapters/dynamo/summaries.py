"""The rolling summary item on DynamoDB: read, and advance with a compare-and-set."""

from __future__ import annotations

from convo_memory.adapters.dynamo import items as it
from convo_memory.adapters.dynamo.table import DynamoTable, n
from convo_memory.domain.models import Summary


class DynamoSummaryStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def get_summary(self, session_id: str) -> Summary | None:
        item = self._table.get(it.summary_key(session_id))
        return it.summary_from(item) if item else None

    def advance_summary(
        self,
        session_id: str,
        previous_through: int,
        summary: Summary,
        earlier: Summary | None = None,
    ) -> bool:
        """Store a newer summary only if the stored one is still at ``previous_through``
        and older than the new one, so the summary only moves forward and no message is
        folded twice. One conditional put, with the ``earlier`` version in the same item
        when given: a summary written for a session deleted meanwhile is removed by the
        deletion's final sweep."""
        if previous_through == 0:
            condition = "attribute_not_exists(sk) OR throughSeq = :prev"
        else:
            condition = "throughSeq = :prev"
        stored, _ = self._table.conditional(
            "put_item",
            Item=it.summary_item(session_id, summary, earlier),
            ConditionExpression=(
                f"({condition}) AND (attribute_not_exists(sk) OR throughSeq < :new)"
            ),
            ExpressionAttributeValues={
                ":prev": n(previous_through),
                ":new": n(summary.through_seq),
            },
        )
        return stored
