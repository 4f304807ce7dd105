"""Declaring agent tools: what a capability may declare (422 otherwise), and the webhook
signing secret (generated, returned once, stored only sealed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convo_memory.api import CapabilityCreate, created_capability
from convo_memory.domain.errors import ValidationFailed
from convo_memory.domain.models import tool_secret_context
from convo_memory.domain.request_rules import parse_model
from convo_memory.services.catalog import SIGNING_SECRET_PREFIX
from tests.fakes.app import WS, FakeApp, fake_app

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def webhook(name: str = "track_parcel", url: str = "https://tools.example.com/track") -> dict:
    return {"name": name, "description": "Where a parcel is", "inputSchema": SCHEMA, "url": url}


def agent(*tools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "orders", "kind": "agent", "tools": list(tools), **extra}


def create(app: FakeApp, body: dict[str, Any]) -> Any:
    return app.container.catalog.register(WS, parse_model(CapabilityCreate, body).definition())


def refused(app: FakeApp, body: dict[str, Any]) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as raised:
        create(app, body)
    return raised.value


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (agent(*[webhook(f"t{i}") for i in range(17)]), "tools"),
        (agent(webhook("9lives")), "tools.0.name"),
        (agent(webhook("has space")), "tools.0.name"),
        (agent(webhook("x" * 65)), "tools.0.name"),
        (agent(webhook("twice"), webhook("twice")), "body"),
        (agent({"name": "get_weather"}), "tools.0"),  # unknown, not a webhook: no more ignoring
        (agent({"name": "lookup_order", "inputSchema": SCHEMA}), "tools.0"),
        (agent(webhook("lookup_order")), "tools.0"),
        (agent({**webhook(), "inputSchema": None}), "tools.0"),
        (agent({**webhook(), "inputSchema": {"type": "string"}}), "tools.0"),
        (agent({**webhook(), "inputSchema": {"type": "object", "properties": []}}), "tools.0"),
        (agent({**webhook(), "inputSchema": {"type": "object", "required": "query"}}), "tools.0"),
        (agent({**webhook(), "description": "d" * 1025}), "tools.0.description"),
        (agent({**webhook(), "url": "tools.example.com/track"}), "tools.0"),
        (agent({**webhook(), "url": "https://u:p@tools.example.com/x"}), "tools.0"),
        (agent({**webhook(), "url": "https://tools.example.com/x#frag"}), "tools.0"),
        (agent({**webhook(), "secret": "mine"}), "tools.0.secret"),
        (agent(webhook(), maxToolSteps=0), "maxToolSteps"),
        (agent(webhook(), maxToolSteps=11), "maxToolSteps"),
        ({"name": "g", "kind": "generative", "maxToolSteps": 3}, "body"),
        ({"name": "g", "kind": "generative", "tools": [{"name": "search_kb"}]}, "body"),
    ],
)
def test_tool_declarations_that_break_the_rules_are_422(body: dict[str, Any], where: str) -> None:
    app = fake_app()
    error = refused(app, body)
    assert error.status == 422 and error.code == "validation_error"
    assert error.message.startswith(f"{where}:") or where == "body", error.message
    assert app.db.capabilities == {} and app.sealer._sealed == {}


def test_an_input_schema_is_bounded_in_size_and_depth() -> None:
    deep: dict[str, Any] = {"type": "object"}
    node = deep
    for _ in range(20):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1_000)}}
    for schema, reason in ((deep, "levels deep"), (big, "bytes")):
        error = refused(fake_app(), agent({**webhook(), "inputSchema": schema}))
        assert reason in error.message


@pytest.mark.parametrize(
    "url",
    [
        "http://tools.example.com/track",  # plain http
        "https://127.0.0.1/x",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/x",
        "https://localhost/x",
        "https://unresolvable.example/x",
    ],
)
def test_a_webhook_url_that_is_not_https_and_public_is_422_at_creation(url: str) -> None:
    error = refused(fake_app(), agent(webhook(url=url)))
    assert error.message.startswith("tools.0.url:")
    assert error.details == [
        {
            "loc": ["tools", "0", "url"],
            "msg": error.message.split(": ", 1)[1],
            "type": "value_error",
        }
    ]


def test_an_operator_allowed_host_may_be_plain_http_on_loopback() -> None:
    app = fake_app(tool_allowed_hosts=("127.0.0.1:8080",))
    created = create(app, agent(webhook(url="http://127.0.0.1:8080/hook")))
    assert created.capability.tools[0].url == "http://127.0.0.1:8080/hook"


def test_the_signing_secret_is_returned_once_and_stored_only_sealed() -> None:
    # Given an agent with a webhook tool and a built-in
    app = fake_app()
    created = create(app, agent(webhook(), {"name": "lookup_order"}, maxToolSteps=3))

    # Then the creation's answer carries the secret, once
    secret = created.tool_signing_secret
    assert secret is not None and secret.startswith(SIGNING_SECRET_PREFIX) and len(secret) > 40
    body = created_capability(created.capability, created.tool_signing_secret)
    assert body["toolSigningSecret"] == secret
    assert body["maxToolSteps"] == 3
    assert [t["name"] for t in body["tools"]] == ["track_parcel", "lookup_order"]
    # And a read never shows it (nor its ciphertext)
    cap_id = created.capability.id
    app.container.catalog._cache.clear()
    for shown in (
        app.container.catalog.get(WS, cap_id).to_json_dict(),
        *[c.to_json_dict() for c in app.container.catalog.list_all(WS)],
    ):
        assert "toolSigningSecret" not in shown and "toolSecretCiphertext" not in shown
        assert secret not in json.dumps(shown)
    # The store holds the sealed form only, bound to this workspace and capability
    stored = app.db.capabilities[(WS, cap_id)]
    assert secret not in stored
    ciphertext = json.loads(stored)["toolSecretCiphertext"]
    assert app.sealer.open(ciphertext, tool_secret_context(WS, cap_id)) == secret
    with pytest.raises(Exception, match="context"):
        app.sealer.open(ciphertext, tool_secret_context("ws_other", cap_id))


def test_each_capability_gets_its_own_secret_and_agents_without_webhooks_get_none() -> None:
    app = fake_app()
    first = create(app, agent(webhook()))
    second = create(app, agent(webhook()))
    builtins_only = create(app, agent({"name": "lookup_order"}, {"name": "search_kb"}))
    assert first.tool_signing_secret != second.tool_signing_secret
    assert builtins_only.tool_signing_secret is None
    assert "toolSigningSecret" not in created_capability(builtins_only.capability, None)
    assert builtins_only.capability.tool_secret_ciphertext is None


def test_a_capability_stored_with_an_unknown_tool_name_still_loads() -> None:
    # Stored before unknown names were refused: it reads back, and its tool is skipped.
    from convo_memory.adapters.tools.toolbox import tool_definitions
    from convo_memory.domain.models import Capability

    stored = {
        "id": "cap_old",
        "name": "old agent",
        "kind": "agent",
        "provider": {"type": "embedded"},
        "tools": [{"name": "get_weather", "description": "legacy"}, {"name": "search_kb"}],
        "createdAt": "2025-01-01T00:00:00.000Z",
    }
    capability = Capability.model_validate(stored)
    assert [d.name for d in tool_definitions(capability)] == ["search_kb"]
    assert CapabilityCreate.model_validate(agent({"name": "search_kb"})).tools[0].name == (
        "search_kb"
    )
