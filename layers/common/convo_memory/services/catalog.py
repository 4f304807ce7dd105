"""Capabilities: create, read, list (workspace-scoped), checked against the deployment."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from convo_memory.domain.connections import ProviderConnections, provider_problem
from convo_memory.domain.errors import CapabilityNotFound, ValidationFailed
from convo_memory.domain.ids import new_id
from convo_memory.domain.models import (
    Capability,
    CapabilityDefinition,
    ProviderConfig,
    ReplayPolicy,
    iso,
    tool_secret_context,
    utc_now,
)
from convo_memory.ports import CapabilityStore, SecretSealer, ToolUrlPolicy

# A webhook signing secret: 32 random bytes, URL-safe text.
SIGNING_SECRET_PREFIX = "whsec_"


def new_signing_secret() -> str:
    return SIGNING_SECRET_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class NewCapability:
    """A created capability and, when it has webhook tools, its signing secret: shown
    once, in the creation's answer, and stored only encrypted."""

    capability: Capability
    tool_signing_secret: str | None = None


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
        tool_urls: ToolUrlPolicy | None = None,
        sealer: SecretSealer | None = None,
        bedrock_available: bool = True,
    ) -> None:
        """``tool_urls`` decides which webhook URLs may be declared (none without it);
        ``sealer`` encrypts webhook signing secrets (no webhook tools without it);
        without ``bedrock_available`` (the local runtime), no Bedrock guardrail."""
        self._store = store
        self.connections = connections or ProviderConnections.embedded_only()
        self._tool_urls = tool_urls
        self._sealer = sealer
        self._bedrock_available = bedrock_available
        self._ttl = cache_ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Capability]] = {}

    def create(
        self, workspace_id: str, definition: CapabilityDefinition, cap_id: str | None = None
    ) -> Capability:
        """Store a new capability (see ``register``)."""
        return self.register(workspace_id, definition, cap_id).capability

    def register(
        self, workspace_id: str, definition: CapabilityDefinition, cap_id: str | None = None
    ) -> NewCapability:
        """Store a new capability. ``ValidationFailed`` (422) when its provider or its
        summary's provider names a connection this deployment lacks, or a model the
        connection does not allow, or a webhook tool's URL may not be called. With
        webhook tools, a signing secret is generated, stored encrypted (bound to the
        workspace and the capability) and returned once."""
        self._check_provider(definition.provider, "provider")
        if definition.summary is not None and definition.summary.provider is not None:
            self._check_provider(definition.summary.provider, "summary.provider")
        for index, tool in enumerate(definition.tools):
            if tool.url is not None:
                self._check_tool_url(index, tool.url)
        content_filter = definition.content_filter
        guardrail = content_filter is not None and content_filter.type != "embedded"
        if guardrail and not self._bedrock_available:
            # It could never check an answer: every answer would be withheld.
            raise _invalid(
                ["contentFilter", "type"],
                "a bedrock-guardrail filter needs Amazon Bedrock, which this deployment "
                "cannot reach (the local runtime has none unless AWS_ENDPOINT_URL_BEDROCK_"
                "RUNTIME points at it); use an embedded filter",
            )
        capability_id = cap_id or new_id("cap")
        secret = ciphertext = None
        if definition.webhook_tools:
            if self._sealer is None:
                raise RuntimeError("no sealer for tool signing secrets is configured")
            secret = new_signing_secret()
            ciphertext = self._sealer.seal(secret, tool_secret_context(workspace_id, capability_id))
        capability = definition.capability(capability_id, iso(utc_now()), ciphertext)
        self._store.put_capability(workspace_id, capability)
        self._cache[(workspace_id, capability.id)] = (self._clock(), capability)
        return NewCapability(capability, secret)

    def _check_tool_url(self, index: int, url: str) -> None:
        problem = (
            self._tool_urls.problem(url)
            if self._tool_urls is not None
            else "this deployment calls no webhook tools"
        )
        if problem is not None:
            raise _invalid(["tools", str(index), "url"], problem)

    def _check_provider(self, provider: ProviderConfig, where: str) -> None:
        problem = provider_problem(self.connections, provider.connection, provider.model_id)
        if problem is not None:
            field, message = problem
            raise _invalid([*where.split("."), field], message)

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

    def bound(self, workspace_id: str, capability_id: str | None) -> Capability | None:
        """A session's capability (None for a conversation no response has bound yet)."""
        return None if capability_id is None else self.get(workspace_id, capability_id)

    def replay_policy_of(self, workspace_id: str, capability_id: str | None) -> ReplayPolicy:
        """How a session's turns replay it: its capability's policy; the default for a
        conversation no response has bound to a capability yet."""
        capability = self.bound(workspace_id, capability_id)
        return capability.replay_policy if capability is not None else ReplayPolicy()

    def list_all(self, workspace_id: str) -> list[Capability]:
        return self._store.list_capabilities(workspace_id)


def _invalid(loc: list[str], message: str) -> ValidationFailed:
    """``422 validation_error`` for the field at ``loc``."""
    return ValidationFailed(
        f"{'.'.join(loc)}: {message}",
        details=[{"loc": loc, "msg": message, "type": "value_error"}],
    )
