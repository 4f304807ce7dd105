"""Capabilities and agent run traces: create, read, list (workspace-scoped)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from convo_memory.domain.errors import CapabilityNotFound, RunNotFound
from convo_memory.domain.models import Capability, CapabilityCreate, iso, utc_now
from convo_memory.ports import CapabilityStore, RunStore


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


class CapabilityCatalog:
    """Capability definitions, cached per warm container for a short time: they change
    rarely and every turn needs one."""

    def __init__(
        self,
        store: CapabilityStore,
        cache_ttl_seconds: float = 30,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = cache_ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Capability]] = {}

    def create(
        self, workspace_id: str, body: CapabilityCreate, cap_id: str | None = None
    ) -> Capability:
        capability = Capability(
            id=cap_id or new_id("cap"),
            created_at=iso(utc_now()),
            **body.model_dump(),
        )
        self._store.put_capability(workspace_id, capability)
        self._cache[(workspace_id, capability.id)] = (self._clock(), capability)
        return capability

    def get(self, workspace_id: str, capability_id: str) -> Capability:
        key = (workspace_id, capability_id)
        cached = self._cache.get(key)
        if cached and self._clock() - cached[0] < self._ttl:
            return cached[1]
        capability = self._store.get_capability(workspace_id, capability_id)
        if capability is None:
            self._cache.pop(key, None)
            raise CapabilityNotFound(f"capability {capability_id!r} not found")
        self._cache[key] = (self._clock(), capability)
        return capability

    def list_all(self, workspace_id: str) -> list[Capability]:
        return self._store.list_capabilities(workspace_id)


class RunTraces:
    """Agent run traces, read back per workspace (``GET /v1/runs/{runId}``)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def get(self, workspace_id: str, run_id: str) -> dict[str, Any]:
        run = self._store.get_run(workspace_id, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id!r} not found")
        return run
