"""Agent run traces: their own table, keyed by run id, scoped by workspace on read.
No TTL and no deletion path: traces outlive the conversations they came from."""

from __future__ import annotations

import json
from typing import Any

from convo_memory.adapters.dynamo.table import DynamoTable, s


class DynamoRunStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_run(self, run: dict[str, Any]) -> None:
        self._table.call(
            "put_item",
            Item={
                "runId": s(run["runId"]),
                "workspaceId": s(run["workspaceId"]),
                "body": s(json.dumps(run)),
            },
        )

    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None:
        item = self._table.get({"runId": s(run_id)})
        if not item or item["workspaceId"]["S"] != workspace_id:
            return None
        run: dict[str, Any] = json.loads(item["body"]["S"])
        return run
