"""Build model providers, content filters and summarizers from capability config, once.

Importing this module never imports boto3 (nor urllib): Bedrock clients are created by
``bedrock_client_factory`` on the first Bedrock call and the remote provider modules are
imported when first built, so a cold start that only needs the embedded provider does
not pay for them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from convo_memory.adapters.providers.classic import ClassicModelProvider
from convo_memory.adapters.providers.embedded import EmbeddedAgentProvider, EmbeddedChatProvider

if TYPE_CHECKING:
    from convo_memory.domain.models import (
        ContentFilterConfig,
        ProviderConfig,
        SummaryConfig,
        ToolSpec,
    )
    from convo_memory.ports import ContentFilter, ModelProvider, Summarizer

logger = logging.getLogger(__name__)

# Generous: a long answer from a large model can take minutes without streaming.
BEDROCK_READ_TIMEOUT_SECONDS = 120


class BedrockClientFactory(Protocol):
    """Returns a bedrock-runtime client: called with no argument for the Lambda's own
    region, or with the capability's ``provider.region`` when it names one."""

    def __call__(self, region: str | None = None, /) -> Any: ...


_clients: dict[str | None, Any] = {}
_clients_lock = threading.Lock()


def bedrock_runtime_client(region: str | None = None, /) -> Any:
    """The default ``BedrockClientFactory``: one client per region per container.

    ``AWS_ENDPOINT_URL`` and the usual credential chain are honoured by boto3 itself.
    """
    with _clients_lock:
        client = _clients.get(region)
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=5,
                read_timeout=BEDROCK_READ_TIMEOUT_SECONDS,
                retries={"mode": "standard", "max_attempts": 3},
            )
            # A session per client: boto3's default session is not thread-safe.
            client = boto3.session.Session().client(
                "bedrock-runtime", region_name=region, config=config
            )
            _clients[region] = client
        return client


def client_factory_for(
    bedrock_client_factory: BedrockClientFactory | None, region: str | None
) -> Callable[[], Any]:
    """A zero-argument builder for a provider or filter to call on first use."""
    make_client = bedrock_client_factory or bedrock_runtime_client
    if region is None:
        return lambda: make_client()
    return lambda: make_client(region)


def _api_key(config: ProviderConfig) -> str | None:
    if not config.api_key_env:
        return None
    key = os.environ.get(config.api_key_env)
    if not key:
        # Local servers (Ollama, vLLM) usually need no key; a server that does will
        # answer 401, which surfaces as a ProviderError naming the status.
        logger.warning(
            "provider.apiKeyEnv %s is not set; calling without a key", config.api_key_env
        )
    return key or None


def build_provider(
    config: ProviderConfig,
    kind: str,
    tools: Sequence[ToolSpec] = (),
    *,
    bedrock_client_factory: BedrockClientFactory | None = None,
) -> ModelProvider:
    """The model provider for a capability of ``kind`` (generative, agent or classic).

    Embedded: ``classic`` -> ClassicModelProvider, ``agent`` -> EmbeddedAgentProvider
    limited to the declared ``tools``, else EmbeddedChatProvider. Bedrock and
    OpenAI-compatible providers serve every kind as plain chat (no tool execution).
    """
    if kind not in ("generative", "agent", "classic"):
        raise ValueError(f"unknown capability kind {kind!r}")
    if config.type == "embedded":
        if kind == "classic":
            return ClassicModelProvider()
        if kind == "agent":
            return EmbeddedAgentProvider(tools=[tool.name for tool in tools])
        return EmbeddedChatProvider()
    if config.type == "bedrock":
        from convo_memory.adapters.providers.bedrock import BedrockConverseProvider

        return BedrockConverseProvider(
            model_id=config.model_id or "",
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            client_factory=client_factory_for(bedrock_client_factory, config.region),
        )
    if config.type == "openai":
        from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider(
            base_url=config.base_url or "",
            model=config.model_id or "",
            api_key=_api_key(config),
            timeout=config.timeout_seconds,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
        )
    raise ValueError(f"unknown provider type {config.type!r}")


T = TypeVar("T")


class AdapterCache:
    """Providers, filters and summarizers built once per distinct config, per container.

    Keys are the config's JSON, so an edited capability gets a fresh adapter. Bounded
    (least recently used first out) and thread-safe for the threaded local runtime.
    """

    def __init__(
        self,
        *,
        bedrock_client_factory: BedrockClientFactory | None = None,
        max_entries: int = 256,
    ) -> None:
        self.bedrock_client_factory = bedrock_client_factory
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
        """Cached ``build_provider``."""
        key = ("provider", kind, config.model_dump_json(), tuple(t.name for t in tools))
        return self._get(
            key,
            lambda: build_provider(
                config, kind, tools, bedrock_client_factory=self.bedrock_client_factory
            ),
        )

    def content_filter(self, config: ContentFilterConfig | None) -> ContentFilter | None:
        """Cached ``build_content_filter``."""
        from convo_memory.adapters.filters import build_content_filter

        if config is None:
            return None
        return self._get(
            ("filter", config.model_dump_json()),
            lambda: build_content_filter(
                config, bedrock_client_factory=self.bedrock_client_factory
            ),
        )

    def summarizer(self, config: SummaryConfig) -> Summarizer:
        """Cached ``build_summarizer``."""
        from convo_memory.adapters.summarizers import build_summarizer

        return self._get(
            ("summarizer", config.model_dump_json()),
            lambda: build_summarizer(config, bedrock_client_factory=self.bedrock_client_factory),
        )

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
