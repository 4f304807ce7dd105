"""The adapters a capability needs (model provider, content filter, summarizer), built
from the deployment's connections once per distinct config, per container.

This is the one module that knows the provider factory, the filters and the summarizers;
none of those import each other or this module, so the adapters form no import cycle.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from convo_memory.domain.connections import ProviderConnections, provider_problem
from convo_memory.domain.errors import ProviderError

if TYPE_CHECKING:
    from convo_memory.adapters.aws_clients import BedrockClientFactory
    from convo_memory.adapters.cache_keys import PromptCacheKeys
    from convo_memory.adapters.secrets import SecretResolver
    from convo_memory.domain.models import (
        Capability,
        ContentFilterConfig,
        ProviderConfig,
        ToolSpec,
    )
    from convo_memory.ports import ContentFilter, ModelProvider, Summarizer

T = TypeVar("T")

DEFAULT_TIMEOUT_CAP_SECONDS = 25.0


def summary_provider(
    capability: Capability, deployment_default: ProviderConfig | None = None
) -> ProviderConfig:
    """Who summarizes a capability's conversations: its ``summary.provider`` when set,
    else the deployment's default summary model when the operator set one, else the
    capability's own connection and model."""
    chosen = capability.summary_config.provider
    return chosen or deployment_default or capability.provider


class AdapterRegistry:
    """Providers, filters and summarizers, built on first use and kept per config.

    A capability's provider is checked against the connections again here: the operator
    may have removed a connection, or narrowed its models, since the capability was
    created; such a turn fails with a ``ProviderError`` instead of calling anything.
    Bounded (least recently used first out) and thread-safe for the threaded local
    runtime.
    """

    def __init__(
        self,
        connections: ProviderConnections | None = None,
        *,
        timeout_cap_seconds: float = DEFAULT_TIMEOUT_CAP_SECONDS,
        secrets: SecretResolver | None = None,
        bedrock_clients: BedrockClientFactory | None = None,
        cache_keys: PromptCacheKeys | None = None,
        max_entries: int = 256,
    ) -> None:
        """``cache_keys`` gives OpenAI-compatible requests their ``prompt_cache_key``
        (none without it)."""
        self.connections = connections or ProviderConnections.embedded_only()
        self.cache_keys = cache_keys
        self.timeout_cap_seconds = timeout_cap_seconds
        self.secrets = secrets
        # The process's Bedrock clients (``AwsClients.bedrock_runtime``): without them, a
        # Bedrock connection cannot be served.
        self.bedrock_clients = bedrock_clients
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, key: Hashable, build: Callable[[], T]) -> T:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = build()  # outside the lock: building never blocks other lookups
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def provider(
        self, config: ProviderConfig, kind: str, tools: Sequence[ToolSpec] = ()
    ) -> ModelProvider:
        """The model provider of a capability's ``provider`` config, for ``kind``."""
        key = ("provider", kind, config.connection, config.model_id, tuple(t.name for t in tools))
        return self._get(key, lambda: self._build_provider(config, kind, tools))

    def _build_provider(
        self, config: ProviderConfig, kind: str, tools: Sequence[ToolSpec]
    ) -> ModelProvider:
        from convo_memory.adapters.providers.factory import build_provider

        problem = provider_problem(self.connections, config.connection, config.model_id)
        connection = self.connections.get(config.connection)
        if problem is not None or connection is None:
            reason = problem[1] if problem else "unknown connection"
            raise ProviderError(
                f"Model provider error: this deployment cannot serve the capability's "
                f"provider ({reason})."
            )
        key_ref = connection.api_key
        secrets = self.secrets
        api_key = None
        if key_ref is not None:
            if secrets is None:
                raise ProviderError("Model provider error: no secret resolver is configured.")
            api_key = lambda: secrets.resolve(key_ref)  # noqa: E731 - read on every call
        return build_provider(
            connection,
            config.model_id,
            kind,
            tools,
            timeout_seconds=connection.timeout_within(self.timeout_cap_seconds),
            bedrock_clients=self.bedrock_clients,
            api_key=api_key,
            cache_key_for=self.cache_keys.key if self.cache_keys else None,
        )

    def content_filter(self, config: ContentFilterConfig | None) -> ContentFilter | None:
        """The capability's content filter (``None`` when it has none)."""
        from convo_memory.adapters.filters import build_content_filter

        if config is None:
            return None
        return self._get(
            ("filter", config.model_dump_json()),
            lambda: build_content_filter(
                config,
                bedrock_clients=self.bedrock_clients,
                timeout_seconds=self.timeout_cap_seconds,
            ),
        )

    def summarizer(self, config: ProviderConfig) -> Summarizer:
        """The summarizer on a provider config (see ``summary_provider``): the embedded
        one on the embedded connection, else that model, called as a generative model
        without tools."""
        from convo_memory.adapters.summarizers import build_summarizer

        connection = self.connections.get(config.connection)
        if connection is not None and connection.type == "embedded":
            return self._get(("summarizer", "embedded"), lambda: build_summarizer(None))
        return self._get(
            ("summarizer", config.connection, config.model_id),
            lambda: build_summarizer(self.provider(config, "generative")),
        )

    def clear(self) -> None:
        """Forget every built adapter (tests)."""
        with self._lock:
            self._entries.clear()
