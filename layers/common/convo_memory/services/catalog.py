"""Capabilities and agent run traces: create, read, list (workspace-scoped)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from convo_memory.domain.connections import ProviderConnections, provider_problem
from convo_memory.domain.errors import CapabilityNotFound, RunNotFound, ValidationFailed
from convo_memory.domain.models import (
    Capability,
    CapabilityCreate,
    ProviderConfig,
    iso,
    utc_now,
)
from convo_memory.ports import CapabilityStore, RunStore


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


class CapabilityCatalog:
    """Capability definitions, cached per warm container for a short time: they change
    rarely and every turn needs one. A capability's providers must fit the deployment's
    ``connections`` (embedded only unless given)."""

    def __init__(
        self,
        store: CapabilityStore,
        cache_ttl_seconds: float = 30,
        clock: Callable[[], float] = time.monotonic,
        *,
        connections: ProviderConnections | None = None,
    ) -> None:
        self._store = store
        self.connections = connections or ProviderConnections.embedded_only()
        self._ttl = cache_ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Capability]] = {}

    def create(
        self, workspace_id: str, body: CapabilityCreate, cap_id: str | None = None
    ) -> Capability:
        """Store a new capability. ``ValidationFailed`` (422) when its provider or its
        summary's provider names a connection this deployment lacks, or a model the
        connection does not allow."""
        self._check_provider(body.provider, "provider")
        if body.summary is not None and body.summary.provider is not None:
            self._check_provider(body.summary.provider, "summary.provider")
        capability = Capability(
            id=cap_id or new_id("cap"),
            created_at=iso(utc_now()),
            **body.model_dump(),
        )
        self._store.put_capability(workspace_id, capability)
        self._cache[(workspace_id, capability.id)] = (self._clock(), capability)
        return capability

    def _check_provider(self, provider: ProviderConfig, where: str) -> None:
        problem = provider_problem(self.connections, provider.connection, provider.model_id)
        if problem is not None:
            field, message = problem
            loc = [*where.split("."), field]
            raise ValidationFailed(
                f"{where}.{field}: {message}",
                details=[{"loc": loc, "msg": message, "type": "value_error"}],
            )

    def providers(self) -> list[dict[str, Any]]:
        """The connections a capability may name: ``{connection, type, models}`` each,
        never a URL, a region or a credential."""
        return self.connections.listing()

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
