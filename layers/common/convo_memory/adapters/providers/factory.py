"""Build a model provider for a capability from the operator's connection.

Importing this module never imports boto3 (nor urllib): Bedrock clients are created on
the first Bedrock call and the remote provider modules are imported when first built,
so a cold start that only needs the embedded provider does not pay for them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from convo_memory.adapters.aws_clients import BedrockClientFactory, client_factory_for
from convo_memory.adapters.providers.classic import ClassicModelProvider
from convo_memory.adapters.providers.embedded import EmbeddedAgentProvider, EmbeddedChatProvider

if TYPE_CHECKING:
    from convo_memory.domain.connections import Connection
    from convo_memory.domain.models import ToolSpec
    from convo_memory.ports import ModelProvider

# Reads the connection's API key at call time (cached and rotated by the secrets adapter).
ApiKeySource = Callable[[], "str | None"]
# A conversation's prompt-cache routing key, from its lineage (None: send none).
CacheKeySource = Callable[[str], "str | None"]

KINDS = ("generative", "agent", "classic")


def build_provider(
    connection: Connection,
    model_id: str | None,
    kind: str,
    tools: Sequence[ToolSpec] = (),
    *,
    timeout_seconds: float,
    bedrock_clients: BedrockClientFactory | None = None,
    api_key: ApiKeySource | None = None,
    cache_key_for: CacheKeySource | None = None,
) -> ModelProvider:
    """The model provider for a capability of ``kind`` (generative, agent or classic)
    on ``connection``, which the caller has already checked allows ``model_id``.

    Embedded: ``classic`` -> ClassicModelProvider, ``agent`` -> EmbeddedAgentProvider
    limited to the declared ``tools``, else EmbeddedChatProvider. Bedrock and
    OpenAI-compatible providers serve every kind, agents through the tool loop (both
    implement ``ToolCallingModel``), with the connection's timeout (already capped),
    ``maxTokens`` and ``temperature``, and its prompt-cache settings (Bedrock's cache
    points and their TTL; OpenAI's ``prompt_cache_key`` from ``cache_key_for``).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown capability kind {kind!r}")
    if connection.type == "embedded":
        if kind == "classic":
            return ClassicModelProvider()
        if kind == "agent":
            return EmbeddedAgentProvider(tools=[tool.name for tool in tools])
        return EmbeddedChatProvider()
    if not model_id:
        raise ValueError(f"a {connection.type} connection needs a model id")
    if connection.type == "bedrock":
        return _bedrock(connection, model_id, timeout_seconds, bedrock_clients)
    if connection.type == "openai":
        from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider

        return OpenAICompatibleProvider(
            base_url=connection.base_url or "",
            model=model_id,
            api_key=api_key,
            timeout=timeout_seconds,
            max_tokens=connection.max_tokens,
            temperature=connection.temperature,
            stream_usage=connection.asks_stream_usage,
            cache_key_for=cache_key_for if connection.sends_prompt_cache_key else None,
            images_by_url=connection.attachments == "url",
        )
    raise ValueError(f"unknown connection type {connection.type!r}")


def _bedrock(
    connection: Connection,
    model_id: str,
    timeout_seconds: float,
    bedrock_clients: BedrockClientFactory | None,
) -> ModelProvider:
    """A Bedrock Converse provider over the process's Bedrock clients."""
    from convo_memory.adapters.providers.bedrock import BedrockConverseProvider

    region = connection.region

    def timed_client(seconds: float) -> Any:
        # Whole seconds, so that a container keeps a handful of clients, not one per call.
        bounded = max(1.0, min(timeout_seconds, float(math.ceil(seconds))))
        return client_factory_for(bedrock_clients, region, bounded)()

    return BedrockConverseProvider(
        model_id=model_id,
        max_tokens=connection.max_tokens,
        temperature=connection.temperature,
        client_factory=client_factory_for(bedrock_clients, region, timeout_seconds),
        timed_client_factory=timed_client,
        prompt_caching=connection.caches_prompts(model_id),
        cache_ttl=connection.prompt_cache_ttl,
    )
