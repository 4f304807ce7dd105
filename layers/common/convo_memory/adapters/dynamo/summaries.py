"""The rolling summary item on DynamoDB: read, and advance with a compare-and-set that
keeps the new text as a version too (``HIST#SUMMARY#<throughSeq>``, never read by a
turn)."""

from __future__ import annotations

from typing import Any

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.table import DynamoTable, number_value
from convo_memory.domain.errors import StoreUnavailable
from convo_memory.domain.models import Summary
from convo_memory.domain.summary_plan import FoldWindow, SummaryVersion
from convo_memory.domain.turn_records import user_seq_of

CONDITION_FAILED = "ConditionalCheckFailed"


class DynamoSummaryStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def get_summary(self, session_id: str) -> Summary | None:
        item = self._table.get(items.summary_key(session_id))
        return summary_items.summary_from(item) if item else None

    def advance_summary(
        self,
        session_id: str,
        previous_through: int,
        summary: Summary,
        earlier: SummaryVersion | None = None,
        *,
        window: FoldWindow | None = None,
    ) -> bool:
        """Store a newer summary only if the stored one is still at ``previous_through``
        and older than the new one, so the summary only moves forward and no message is
        folded twice. One transaction: the conditional put of the summary (with
        ``earlier`` in the same item) and the put of the same text as a kept version, so
        a version is kept exactly when its summary was stored; with ``window``, also a
        check that the turn after the window's history has not landed (no turn of a
        later window has read the versions yet). A summary written for a session deleted
        meanwhile is removed by the deletion's final sweep."""
        made_at = window.omitted if window else 0
        put: dict[str, Any] = {
            "Item": summary_items.summary_item(session_id, summary, earlier, made_at),
            "ConditionExpression": (
                f"({_previous(previous_through)}) AND "
                "(attribute_not_exists(sk) OR throughSeq < :new)"
            ),
            "ExpressionAttributeValues": {
                ":prev": number_value(previous_through),
                ":new": number_value(summary.through_seq),
            },
        }
        kept = summary_items.summary_version_item(session_id, SummaryVersion(summary, made_at))
        entries: list[dict[str, Any]] = [{"Put": put}, {"Put": {"Item": kept}}]
        if window is not None:
            no_later_turn = {
                "Key": items.turn_key(session_id, user_seq_of(window.message_count + 1)),
                "ConditionExpression": "attribute_not_exists(sk)",
            }
            entries.append({"ConditionCheck": no_later_turn})
        reasons = self._table.transact(entries)
        if reasons is None:
            return True
        if any(reason == CONDITION_FAILED for reason in reasons):
            return False
        # Canceled by a conflicting transaction or throttling: worth a retry of the job.
        raise StoreUnavailable(f"summary transaction canceled ({', '.join(sorted(set(reasons)))})")


def _previous(previous_through: int) -> str:
    if previous_through == 0:
        return "attribute_not_exists(sk) OR throughSeq = :prev"
    return "throughSeq = :prev"
