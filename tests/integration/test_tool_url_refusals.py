"""No DNS oracle: a tool URL refused when its capability is created, or when a turn
calls it, is "not allowed" in the same words whether its host resolves to a private
address, to several, or to nothing at all, and no refusal ever names an address.

DNS is a table (the container's URL policy takes a resolver): nothing is resolved for
real and no call leaves 127.0.0.1."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from convo_memory.adapters.tools.toolbox import ToolAdapters
from convo_memory.adapters.tools.url_policy import NOT_ALLOWED, UrlPolicy
from convo_memory.bootstrap import Adapters, Infrastructure
from convo_memory.services.admin import create_workspace
from tests.fakes.adapters import FakeResolver
from tests.support.agent_api import (
    create_agent,
    predict,
    stream_url_door,
    webhook_tool,
)
from tests.support.inprocess_api import InProcessApi, inprocess_stack
from tests.support.sse import parse_sse

PUBLIC = "93.184.216.34"
DNS = {
    "inside.example": ["10.1.2.3"],
    "loopback.example": ["127.0.0.1", "::1"],
    "metadata.example": ["169.254.169.254"],
    "mixed.example": [PUBLIC, "10.9.9.9"],
    "rebind.example": [PUBLIC],
}
REFUSED_URLS = [
    "https://inside.example/tool",
    "https://loopback.example/tool",
    "https://metadata.example/latest/meta-data",
    "https://mixed.example/tool",
    "https://nowhere.example/tool",  # does not resolve
    "https://127.0.0.1/tool",
    "https://[::ffff:10.0.0.1]/tool",
    "https://[fd00::7]:8443/tool",
]
ADDRESS_LIKE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}|[0-9a-f]{0,4}:[0-9a-f:.]*:[0-9a-f.]*", re.I)


def addresses_named(text: str) -> list[str]:
    """What in ``text`` parses as an IP address."""
    named = []
    for candidate in ADDRESS_LIKE.findall(text):
        try:
            ipaddress.ip_address(candidate)
        except ValueError:
            continue
        named.append(candidate)
    return named


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver(DNS)


@pytest.fixture
def api(resolver: FakeResolver) -> Iterator[InProcessApi]:
    def with_fake_dns(adapters: Adapters, infrastructure: Infrastructure) -> Adapters:
        tools = ToolAdapters(UrlPolicy(resolve=resolver), adapters.sealer)
        return replace(adapters, tool_urls=tools.policy, toolbox_for=tools.toolbox)

    with inprocess_stack(adapt=with_fake_dns) as stack:
        yield stack


@pytest.fixture
def token(api: InProcessApi) -> str:
    return create_workspace(api.container.adapters.stores.tokens, "alpha").token


def create(api: InProcessApi, token: str, url: str) -> Any:
    body = {"name": "agent", "kind": "agent", "tools": [webhook_tool("order", url)]}
    return api.call("POST", "/v1/capabilities", token=token, json_body=body)


def test_creation_refusals_read_the_same_and_name_no_address(api: InProcessApi, token: str) -> None:
    bodies = []
    for url in REFUSED_URLS:
        refused = create(api, token, url)
        assert refused.status == 422, (url, refused.body)
        bodies.append(refused.body)

    messages = {body["error"]["message"] for body in bodies}
    assert messages == {f"tools.0.url: {NOT_ALLOWED}"}  # one answer for every case
    assert {body["error"]["details"][0]["msg"] for body in bodies} == {NOT_ALLOWED}
    assert addresses_named(json.dumps(bodies)) == []
    assert "not allowed" in NOT_ALLOWED and addresses_named(NOT_ALLOWED) == []


@pytest.mark.parametrize("rebound", [["127.0.0.1"], ["10.1.2.3", PUBLIC], ["169.254.169.254"], []])
def test_call_time_refusals_read_the_same_and_name_no_address(
    api: InProcessApi, token: str, resolver: FakeResolver, rebound: list[str]
) -> None:
    created, _, _ = create_agent(api, token, webhook_tool("order", "https://rebind.example/t"))
    # The name now points inside (or nowhere) before any call is made.
    if rebound:
        resolver.table["rebind.example"] = rebound
    else:
        del resolver.table["rebind.example"]

    answer = predict(api, token, created, "where is my order?")
    status, raw = stream_url_door(api, token, created, {"input": "and my order now?"})

    assert answer.status == 200 and status == 200
    streamed_run_id = parse_sse(raw)[-1][1]["runId"]
    runs = [
        api.call("GET", f"/v1/runs/{run_id}", token=token).body
        for run_id in (answer.body["runId"], streamed_run_id)
    ]
    for run in runs:
        [step] = run["steps"]
        assert step["status"] == "error"
        assert step["output"] == f"the tool was not called: {NOT_ALLOWED}"
    assert addresses_named(json.dumps(answer.body) + json.dumps(runs) + raw) == []
