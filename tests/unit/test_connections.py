"""Operator-owned provider connections: the capability's provider shape, the catalog's
check against the deployment's connections, the registry's re-check at call time, and
an import graph of the adapters without cycles."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from convo_memory.adapters.providers.embedded import EmbeddedChatProvider
from convo_memory.adapters.providers.openai_compat import OpenAICompatibleProvider
from convo_memory.adapters.registry import AdapterRegistry
from convo_memory.api import CapabilityCreate
from convo_memory.domain.connections import ApiKeyRef, parse_connections, provider_problem
from convo_memory.domain.errors import ProviderError, ValidationFailed
from convo_memory.domain.models import Capability, ProviderConfig, SummaryConfig
from convo_memory.services.admin import DEMO_CAPABILITIES, seed_capabilities
from convo_memory.services.catalog import CapabilityCatalog
from tests.fakes.stores import FakeDatabase

LAYER = Path(__file__).resolve().parents[2] / "layers" / "common"
CONNECTIONS = parse_connections(
    {
        "bedrock": {"type": "bedrock", "region": "us-east-1", "models": ["anthropic.*"]},
        "ollama": {
            "type": "openai",
            "baseUrl": "http://10.0.3.7:11434/v1",
            "models": ["llama3.*", "qwen2:7b"],
            "apiKey": {"env": "OLLAMA_KEY"},
        },
    }
)


def catalog() -> CapabilityCatalog:
    return CapabilityCatalog(FakeDatabase().stores.capabilities, connections=CONNECTIONS)


def create(body: dict[str, Any]) -> Capability:
    full = {"name": "c", "kind": "generative", **body}
    return catalog().create("ws", CapabilityCreate.model_validate(full).definition())


# ---------------------------------------------------------------- the wire shape


@pytest.mark.parametrize(
    "provider",
    [
        {"type": "embedded"},
        {"connection": "embedded"},
        {"type": "embedded", "connection": "embedded"},
    ],
)
def test_the_embedded_shorthand_names_the_embedded_connection(provider: dict[str, Any]) -> None:
    assert ProviderConfig.model_validate(provider) == ProviderConfig(connection="embedded")


@pytest.mark.parametrize(
    "provider",
    [
        {"connection": "ollama", "modelId": "llama3.1", "baseUrl": "http://attacker:1/v1"},
        {"connection": "ollama", "modelId": "llama3.1", "apiKeyEnv": "CONVO_DEV_TOKEN"},
        {"connection": "ollama", "modelId": "llama3.1", "apiKey": "sk-1"},
        {"connection": "ollama", "modelId": "llama3.1", "headers": {"X": "1"}},
        {"connection": "bedrock", "modelId": "anthropic.x", "region": "eu-west-1"},
        {"connection": "ollama", "modelId": "llama3.1", "timeoutSeconds": 5},
        {"connection": "ollama", "modelId": "llama3.1", "maxTokens": 5},
        {"type": "openai", "baseUrl": "http://127.0.0.1:9/v1", "modelId": "m"},
        {"type": "bedrock", "modelId": "anthropic.x"},
        {"type": "embedded", "baseUrl": "http://127.0.0.1:9/v1"},
        {"type": "embedded", "connection": "ollama"},
        {"connection": ""},
        {"connection": "../etc"},
    ],
)
def test_endpoint_credential_and_knob_fields_are_refused(provider: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ProviderConfig.model_validate(provider)
    with pytest.raises(ValidationError):
        SummaryConfig.model_validate({"provider": provider})


def test_a_capability_stored_before_connections_reads_as_a_connection() -> None:
    legacy = {
        "id": "cap-1",
        "name": "old",
        "kind": "generative",
        "createdAt": "2025-01-01T00:00:00.000Z",
        "provider": {
            "type": "openai",
            "modelId": "llama3.1",
            "baseUrl": "http://10.9.9.9/v1",
            "apiKeyEnv": "SOME_VAR",
            "region": None,
            "maxTokens": None,
            "temperature": None,
            "timeoutSeconds": 60.0,
        },
        "summary": {"provider": {"type": "embedded", "modelId": None}, "maxChars": 500},
    }

    capability = Capability.model_validate_json(json.dumps(legacy))

    # The stored endpoint and key variable are gone: only a connection name is left.
    assert capability.provider == ProviderConfig(connection="openai", model_id="llama3.1")
    assert capability.summary_config.provider == ProviderConfig(connection="embedded")
    assert "baseUrl" not in json.dumps(capability.to_json_dict())


# ---------------------------------------------------------------- the catalog's check


def test_a_capability_on_a_connection_and_an_allowed_model_is_stored_as_named() -> None:
    capability = create(
        {
            "provider": {"connection": "ollama", "modelId": "llama3.1:8b"},
            "summary": {"provider": {"connection": "bedrock", "modelId": "anthropic.haiku"}},
        }
    )

    assert capability.to_json_dict()["provider"] == {
        "connection": "ollama",
        "modelId": "llama3.1:8b",
    }
    assert capability.to_json_dict()["summary"]["provider"] == {
        "connection": "bedrock",
        "modelId": "anthropic.haiku",
    }


def test_the_shorthand_is_returned_as_the_embedded_connection() -> None:
    capability = create({"provider": {"type": "embedded"}})

    assert capability.to_json_dict()["provider"] == {"connection": "embedded", "modelId": None}


@pytest.mark.parametrize(
    ("body", "loc", "fragment"),
    [
        (
            {"provider": {"connection": "openai", "modelId": "gpt-4o"}},
            ["provider", "connection"],
            "unknown connection 'openai'",
        ),
        (
            {"provider": {"connection": "ollama", "modelId": "mistral"}},
            ["provider", "modelId"],
            "does not allow",
        ),
        (
            {"provider": {"connection": "ollama", "modelId": "Llama3.1"}},
            ["provider", "modelId"],
            "does not allow",
        ),
        (
            {"provider": {"connection": "ollama", "modelId": "qwen2:7b-extra"}},
            ["provider", "modelId"],
            "does not allow",
        ),
        ({"provider": {"connection": "bedrock"}}, ["provider", "modelId"], "needs a modelId"),
        (
            {"provider": {"connection": "embedded", "modelId": "x"}},
            ["provider", "modelId"],
            "takes no modelId",
        ),
        (
            {"provider": {"type": "embedded", "modelId": "x"}},
            ["provider", "modelId"],
            "takes no modelId",
        ),
        (
            {"summary": {"provider": {"connection": "nowhere", "modelId": "m"}}},
            ["summary", "provider", "connection"],
            "unknown connection",
        ),
    ],
)
def test_a_provider_the_deployment_cannot_serve_is_a_validation_error(
    body: dict[str, Any], loc: list[str], fragment: str
) -> None:
    catalog = CapabilityCatalog(FakeDatabase().stores.capabilities, connections=CONNECTIONS)

    with pytest.raises(ValidationFailed) as raised:
        catalog.create(
            "ws",
            CapabilityCreate.model_validate({"name": "c", "kind": "agent", **body}).definition(),
        )

    assert raised.value.status == 422 and raised.value.code == "validation_error"
    assert fragment in raised.value.message
    assert raised.value.details and raised.value.details[0]["loc"] == loc
    assert catalog.list_all("ws") == []  # nothing stored


def test_globs_match_like_fnmatch() -> None:
    assert provider_problem(CONNECTIONS, "ollama", "llama3.") is None
    assert provider_problem(CONNECTIONS, "ollama", "qwen2:7b") is None
    assert provider_problem(CONNECTIONS, "ollama", "llama3") is not None  # "." is literal


def test_the_demo_capabilities_are_seeded_through_the_embedded_connection() -> None:
    store = FakeDatabase().stores.capabilities

    seed_capabilities(store, "ws")

    for cap_id in DEMO_CAPABILITIES:
        capability = store.get_capability("ws", cap_id)
        assert capability is not None
        assert capability.provider == ProviderConfig(connection="embedded")


def test_the_provider_listing_shows_names_types_and_models_only() -> None:
    listing = catalog().providers()

    assert listing == [
        {"connection": "embedded", "type": "embedded", "models": []},
        {"connection": "bedrock", "type": "bedrock", "models": ["anthropic.*"]},
        {"connection": "ollama", "type": "openai", "models": ["llama3.*", "qwen2:7b"]},
    ]
    text = json.dumps(listing)
    assert "10.0.3.7" not in text and "OLLAMA_KEY" not in text and "us-east-1" not in text


# ---------------------------------------------------------------- the registry


class FakeSecrets:
    def __init__(self, value: str) -> None:
        self.value = value
        self.reads: list[ApiKeyRef] = []

    def resolve(self, ref: ApiKeyRef) -> str:
        self.reads.append(ref)
        return self.value


def test_the_registry_reads_the_key_when_the_provider_calls_not_before() -> None:
    secrets = FakeSecrets("sk-operator")
    registry = AdapterRegistry(CONNECTIONS, secrets=secrets, timeout_cap_seconds=9)  # type: ignore[arg-type]

    provider = registry.provider(ProviderConfig(connection="ollama", model_id="llama3.1"), "agent")

    assert isinstance(provider, OpenAICompatibleProvider)
    assert provider.url == "http://10.0.3.7:11434/v1/chat/completions"
    assert provider.timeout == 9
    assert secrets.reads == []
    assert "sk-operator" not in repr(provider)


def test_a_capability_whose_connection_was_removed_fails_as_a_provider_error() -> None:
    # Created while the deployment had "ollama"; served by one that no longer has it.
    capability = create({"provider": {"connection": "ollama", "modelId": "llama3.1"}})
    registry = AdapterRegistry(parse_connections({}))

    with pytest.raises(ProviderError) as raised:
        registry.provider(capability.provider, capability.kind)

    assert raised.value.status == 502 and "unknown connection 'ollama'" in raised.value.message
    assert isinstance(registry.provider(ProviderConfig(), "generative"), EmbeddedChatProvider)


# ---------------------------------------------------------------- import graph


def _adapter_imports() -> dict[str, set[str]]:
    """module -> the convo_memory.adapters modules it imports (anywhere in the file,
    TYPE_CHECKING and function-level imports included)."""
    root = LAYER / "convo_memory" / "adapters"
    modules = {
        ".".join(path.relative_to(LAYER).with_suffix("").parts).removesuffix(".__init__"): path
        for path in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            targets |= {name for name in names if name in modules and name != module}
        graph[module] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target, [*path, target])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def test_the_adapters_import_each_other_without_a_cycle() -> None:
    graph = _adapter_imports()
    registry = graph["convo_memory.adapters.registry"]
    assert {"convo_memory.adapters.filters", "convo_memory.adapters.summarizers"} <= registry
    assert "convo_memory.adapters.providers.factory" in registry

    assert find_cycle(graph) is None


def test_the_cycle_check_finds_the_old_circle() -> None:
    # factory -> filters/summarizers (the cache) and both back to factory, as before.
    graph = {
        "factory": {"filters", "summarizers"},
        "filters": {"factory"},
        "summarizers": {"factory"},
    }

    assert find_cycle(graph) == ["factory", "filters", "factory"]


# -- prompt caching (v3) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "caches"),
    [
        ("anthropic.claude-3-5-haiku-20241022-v1:0", True),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", True),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", True),
        ("amazon.nova-lite-v1:0", True),
        ("anthropic.claude-3-haiku-20240307-v1:0", False),
        ("meta.llama3-1-70b-instruct-v1:0", False),
    ],
)
def test_a_bedrock_connection_caches_the_documented_models_unless_told(
    model_id: str, caches: bool
) -> None:
    listed = parse_connections({"b": {"type": "bedrock", "models": ["*"]}}).get("b")
    on = parse_connections({"b": {"type": "bedrock", "models": ["*"], "promptCaching": True}})
    off = parse_connections({"b": {"type": "bedrock", "models": ["*"], "promptCaching": False}})

    assert listed is not None and listed.caches_prompts(model_id) is caches
    assert on.get("b").caches_prompts(model_id) is True  # type: ignore[union-attr]
    assert off.get("b").caches_prompts(model_id) is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "connection",
    [
        {"type": "openai", "baseUrl": "http://10.0.3.7:11434/v1", "models": ["*"]},
        {"type": "embedded"},
    ],
)
def test_prompt_caching_is_a_bedrock_setting_only(connection: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="promptCaching applies to bedrock"):
        parse_connections({"c": {**connection, "promptCaching": True}})
    # An OpenAI-compatible provider caches a repeated prefix on its own: never marked.
    if connection["type"] == "openai":
        built = parse_connections({"c": connection}).get("c")
        assert built is not None and built.caches_prompts("llama3.1") is False


def test_an_openai_connections_streams_ask_for_usage_unless_told_not_to() -> None:
    base = {"type": "openai", "baseUrl": "http://10.0.3.7:11434/v1", "models": ["*"]}
    default = parse_connections({"c": base}).get("c")
    off = parse_connections({"c": {**base, "streamUsage": False}}).get("c")

    assert default is not None and default.asks_stream_usage is True
    assert off is not None and off.asks_stream_usage is False


@pytest.mark.parametrize(
    "connection",
    [{"type": "bedrock", "models": ["*"]}, {"type": "embedded"}],
)
def test_stream_usage_is_an_openai_setting_only(connection: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="streamUsage applies to openai"):
        parse_connections({"c": {**connection, "streamUsage": True}})
