"""Agent run traces: their own table, keyed by run id, scoped by workspace on read.
No TTL: traces outlive the conversations they came from; only an erasure with
``traces: "erase"`` deletes them (``adapters.dynamo.erasures``).

A turn that recorded names its run (``r`` on the turn item), so an erasure finds a
session's runs in the session's own partition at no cost per turn. A run whose turn
failed is in no transcript: it carries ``failedSessionId``, which puts it (and only it)
in the sparse ``failedRunsBySession`` index."""

from __future__ import annotations

import json
from typing import Any

from convo_memory.adapters.dynamo.table import DynamoTable, string_value

FAILED_SESSION = "failedSessionId"
FAILED_RUNS_INDEX = "failedRunsBySession"


class DynamoRunStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_run(self, run: dict[str, Any]) -> None:
        item = {
            "runId": string_value(run["runId"]),
            "workspaceId": string_value(run["workspaceId"]),
            "body": string_value(json.dumps(run)),
        }
        if run.get("status") == "failed" and run.get("sessionId"):
            item[FAILED_SESSION] = string_value(str(run["sessionId"]))
        self._table.call("put_item", Item=item)

    def get_run(self, workspace_id: str, run_id: str) -> dict[str, Any] | None:
        item = self._table.get({"runId": string_value(run_id)})
        if not item or item["workspaceId"]["S"] != workspace_id:
            return None
        run: dict[str, Any] = json.loads(item["body"]["S"])
        return run
