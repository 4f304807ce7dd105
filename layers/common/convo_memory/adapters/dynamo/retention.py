"""What the scheduled retention run reads and changes on DynamoDB, through the sparse,
keys-only byActivity index: ``ACTIVE#NN`` (sort key: the coarse lastActiveAt mark),
``ARCHIVED#NN`` (archivedAt) and ``DELETING#NN`` (deletedAt) hold session heads;
``PENDING#NN`` (when it stops waiting) the turns paused for the app's tools (v4). The index is
eventually consistent, so every change re-checks its item with a conditional write."""

from __future__ import annotations

from collections.abc import Iterator

from convo_memory.adapters.dynamo import items
from convo_memory.adapters.dynamo.sessions import delete_contents, newest_turn
from convo_memory.adapters.dynamo.table import DynamoTable, string_value
from convo_memory.adapters.dynamo.turns import DynamoTurnStore
from convo_memory.domain.errors import PauseEnded
from convo_memory.domain.turn_records import abandoned_turn


class DynamoRetentionStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table
        self._turns = DynamoTurnStore(table)

    @property
    def activity_shards(self) -> int:
        return items.ACTIVITY_SHARDS

    def sessions_by_activity(
        self, status: str, shard: int, before: str, page_size: int = 100
    ) -> Iterator[tuple[str, str]]:
        for item in self._table.query_all(
            IndexName="byActivity",
            KeyConditionExpression="gsi2pk = :p AND gsi2sk < :before",
            ExpressionAttributeValues={
                ":p": string_value(f"{items.INDEX_PREFIX[status]}#{shard:02d}"),
                ":before": string_value(before),
            },
            Limit=page_size,
        ):
            yield item["pk"]["S"].removeprefix("SESSION#"), item["gsi2sk"]["S"]

    def last_turn_at(self, session_id: str) -> tuple[int, str] | None:
        newest = newest_turn(self._table, session_id, consistent=True)
        if newest is None:
            return None
        return items.user_seq_of_item(newest) + 1, items.turn_created_at(newest)

    def paused_turns(self, shard: int, before: str) -> Iterator[tuple[str, int]]:
        for item in self._table.query_all(
            IndexName="byActivity",
            KeyConditionExpression="gsi2pk = :p AND gsi2sk < :before",
            ExpressionAttributeValues={
                ":p": string_value(f"{items.PENDING_INDEX_PREFIX}#{shard:02d}"),
                ":before": string_value(before),
            },
            Limit=100,
        ):
            yield item["pk"]["S"].removeprefix("SESSION#"), items.user_seq_of_item(item)

    def abandon_paused(self, session_id: str, user_seq: int, before: str) -> bool:
        """One consistent read of the paused turn, then its abandoned record written over
        it, conditional on the pause it read."""
        item = self._table.get(items.turn_key(session_id, user_seq))
        if item is None or not items.is_pending(item):
            return False
        pending = items.pending_from(item)
        if pending.expires >= before:
            return False  # it paused again since the index was written
        try:
            self._turns.append_turn(session_id, user_seq - 1, abandoned_turn(pending))
        except PauseEnded:
            return False
        return True

    def refresh_activity(self, session_id: str, seen: str, last_active_at: str) -> bool:
        """Move an active head's mark forward to its real last turn (the mark is coarse)."""
        moved, _ = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET lastActiveAt = :at, gsi2sk = :at",
            ConditionExpression="#st = :active AND lastActiveAt = :seen",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":at": string_value(last_active_at),
                ":active": string_value("active"),
                ":seen": string_value(seen),
            },
        )
        return moved

    def archive_session(self, session_id: str, last_active_at: str, archived_at: str) -> bool:
        """Archive an active session whose mark has not moved since ``last_active_at``
        (a turn on an idle session moves the mark first, so it wins or is refused)."""
        archived, _ = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression="SET #st = :archived, archivedAt = :at, gsi2pk = :p, gsi2sk = :at",
            ConditionExpression="#st = :active AND lastActiveAt = :seen",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":archived": string_value("archived"),
                ":active": string_value("active"),
                ":at": string_value(archived_at),
                ":seen": string_value(last_active_at),
                ":p": string_value(items.activity_pk("archived", session_id)),
            },
        )
        return archived

    def begin_purge(self, session_id: str, archived_at: str, deleted_at: str) -> bool:
        """Mark an archived session (still archived at ``archived_at``) deleted, its head
        stripped to a tombstone as by a deletion."""
        remove = ", ".join(("gsi1pk", "gsi1sk", *items.PERSONAL_HEAD_ATTRIBUTES))
        marked, _ = self._table.conditional(
            "update_item",
            Key=items.head_key(session_id),
            UpdateExpression=(
                f"SET #st = :del, deletedAt = :at, gsi2pk = :p, gsi2sk = :at REMOVE {remove}"
            ),
            ConditionExpression="#st = :archived AND archivedAt = :archived_at",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":del": string_value("deleting"),
                ":archived": string_value("archived"),
                ":archived_at": string_value(archived_at),
                ":at": string_value(deleted_at),
                ":p": string_value(items.activity_pk("deleting", session_id)),
            },
        )
        return marked

    def delete_contents(self, session_id: str) -> int:
        return delete_contents(self._table, session_id)

    def remove_head(self, session_id: str) -> bool:
        removed, _ = self._table.conditional(
            "delete_item",
            Key=items.head_key(session_id),
            ConditionExpression="#st = :del",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={":del": string_value("deleting")},
        )
        return removed
