"""What a new session's recall reads on DynamoDB: the end user's newest sessions from
the byExternalRef index (filtered here by capability and principal, which the index
projects), then one consistent Query per earlier session. See ``items`` for the layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.adapters.dynamo.table import DynamoTable, Item, string_value
from convo_memory.domain.models import Principal
from convo_memory.domain.recall import RecallSource, canonical_principal

# Heads per page of the byExternalRef index (each about 300 bytes as projected).
CANDIDATE_PAGE_SIZE = 50
# Statuses of a session that may be recalled (a deleted or erased one never is).
RECALLABLE = ("active", "archived")


class DynamoRecallStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def candidates(
        self,
        workspace_id: str,
        external_ref: str,
        capability_id: str,
        principal: Principal | None,
        limit: int,
        scan: int,
    ) -> list[str]:
        partition = items.external_ref_pk(workspace_id, external_ref)
        wanted_principal = canonical_principal(principal)
        found: list[str] = []
        examined = 0
        start: dict[str, Any] | None = None
        while examined < scan and len(found) < limit:
            args: dict[str, Any] = {
                "IndexName": "byExternalRef",
                "KeyConditionExpression": "gsi1pk = :p",
                "ExpressionAttributeValues": {":p": string_value(partition)},
                "ExpressionAttributeNames": {"#st": "status"},
                "ProjectionExpression": "pk, capabilityId, principal, #st",
                "ScanIndexForward": False,
                "Limit": min(CANDIDATE_PAGE_SIZE, scan - examined),
            }
            if start:
                args["ExclusiveStartKey"] = start
            out = self._table.query(**args)
            heads: list[Item] = out.get("Items", [])
            examined += len(heads)
            for head in heads:
                if (
                    items.head_status(head) in RECALLABLE
                    and head.get("capabilityId", {}).get("S") == capability_id
                    and canonical_principal(json.loads(head["principal"]["S"])) == wanted_principal
                ):
                    found.append(head["pk"]["S"].removeprefix("SESSION#"))
            start = out.get("LastEvaluatedKey")
            if not start:
                break
        return found[:limit]

    def sources(self, session_ids: Sequence[str], max_turns: int) -> list[RecallSource | None]:
        if len(session_ids) <= 1:
            return [self._source(sid, max_turns) for sid in session_ids]
        with ThreadPoolExecutor(max_workers=len(session_ids)) as pool:
            return list(pool.map(lambda sid: self._source(sid, max_turns), session_ids))

    def _source(self, session_id: str, max_turns: int) -> RecallSource | None:
        """One descending consistent Query: the summary, the head (is it still
        recallable?), then the newest turns (and their digests, skipped)."""
        out = self._table.query(
            KeyConditionExpression="pk = :pk AND sk > :lo",
            ExpressionAttributeValues={
                ":pk": items.session_pk(session_id),
                ":lo": string_value(items.MSG_PREFIX),
            },
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=2 + 2 * max_turns,
        )
        head: Item | None = None
        summary: str | None = None
        turns: list[Item] = []
        for item in out.get("Items", []):
            sk = item["sk"]["S"]
            if sk == items.SESSION_SK:
                head = item
            elif sk == items.SUMMARY_SK:
                summary = summary_items.summary_from(item).text
            elif items.is_turn(item) and len(turns) < max_turns:
                turns.append(item)
        if head is None or items.head_status(head) not in RECALLABLE:
            return None
        messages = tuple(m for item in reversed(turns) for m in items.messages_from(item))
        return RecallSource(session_id, head["createdAt"]["S"], summary, messages)
