"""Agent run traces, read back per workspace (``GET /v1/runs/{runId}``): the audit
record of what each tool was sent and returned, which outlives the conversation."""

from __future__ import annotations

from typing import Any

from convo_memory.domain.errors import RunNotFound
from convo_memory.ports import RunStore


class RunTraces:
    """The runs of a workspace's agent turns."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def get(self, workspace_id: str, run_id: str) -> dict[str, Any]:
        run = self._store.get_run(workspace_id, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id!r} not found")
        return run
