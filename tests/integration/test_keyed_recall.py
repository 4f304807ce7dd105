"""A session the OpenAI-compatible door opens by an app's key is opened like any other:
on a capability with ``recall`` it starts with what the same end user said before, and
nothing of another end user."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chat_door import chat_body, chat_http, chat_stream_door, keyed, user
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant

ALICE = {"tenant_id": "store-a", "user_id": "alice"}
DOORS = [pytest.param(chat_http, id="HttpApi"), pytest.param(chat_stream_door, id="Function URL")]


def recalling_capability(api: InProcessApi, tenant: Tenant) -> str:
    body = {"name": "remembers", "kind": "generative", "recall": {"sessions": 2}}
    response = api.call("POST", "/v1/capabilities", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


@pytest.mark.parametrize("door", DOORS)
def test_a_session_opened_by_key_carries_its_end_users_recall(
    api: InProcessApi, tenant: Tenant, door: Any
) -> None:
    cap = recalling_capability(api, tenant)
    earlier = door(
        api,
        tenant,
        chat_body(cap, user("My loyalty number is LN-55821."), user="customer-9"),
        keyed("conv-earlier", ALICE),
    )
    assert earlier.status == 200, earlier.body
    earlier_id = earlier.body["convo"]["sessionId"]

    later = door(
        api,
        tenant,
        chat_body(cap, user("What is my loyalty number?"), user="customer-9"),
        keyed("conv-later", ALICE),
    )
    assert later.status == 200, later.body
    later_id = later.body["convo"]["sessionId"]
    assert later_id != earlier_id

    context = api.call("GET", f"/v1/sessions/{later_id}/context", token=tenant.token).body
    assert context["recall"]["fromSessions"] == [earlier_id]
    assert "LN-55821" in context["recall"]["text"]
    # Another end user's key session on the same capability recalls nothing of it.
    other = door(
        api,
        tenant,
        chat_body(cap, user("Hello"), user="customer-10"),
        keyed("conv-other", ALICE),
    )
    other_context = api.call(
        "GET", f"/v1/sessions/{other.body['convo']['sessionId']}/context", token=tenant.token
    ).body
    assert other_context["recall"] is None
