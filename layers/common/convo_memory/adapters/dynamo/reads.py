"""Reads several stores share."""

from __future__ import annotations

from convo_memory.adapters.dynamo import items as it
from convo_memory.adapters.dynamo.table import DynamoTable, Item, s


def newest_turn(table: DynamoTable, session_id: str, *, consistent: bool) -> Item | None:
    """The key and createdAt of a session's newest turn (or of its digest, which carries
    the same position): one read of at most one item."""
    out = table.query(
        KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
        ExpressionAttributeValues={
            ":pk": it.session_pk(session_id),
            ":lo": s(it.MSG_PREFIX),
            ":hi": s(it.MSG_UPPER),
        },
        ProjectionExpression="sk, #at",
        ExpressionAttributeNames={"#at": "at"},
        ScanIndexForward=False,
        ConsistentRead=consistent,
        Limit=1,
    )
    found: list[Item] = out.get("Items", [])
    return found[0] if found else None
