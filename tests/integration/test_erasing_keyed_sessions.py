"""An end user's sessions the OpenAI-compatible door opened by an app's key are erased
like any other, and so are their keys: afterwards no item of any table names the key,
the session or the end user, and the same key opens a fresh session for a new end user
of that name (the app's conversation id was released with its session)."""

from __future__ import annotations

import pytest

from tests.support.chat_door import chat_body, chat_http, keyed, user
from tests.support.erasure_jobs import run_erasure_jobs
from tests.support.inprocess_api import InProcessApi
from tests.support.table_scan import every_item, items_naming
from tests.support.tenants import Tenant

# A scan reads every item of the backend: each test gets a backend of its own.
pytestmark = pytest.mark.fresh_stack

REF = "customer-erased-7"
KEY = "app-conversation-0042"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_erased"}


def test_a_key_opened_session_is_erased_with_its_key(api: InProcessApi, tenant: Tenant) -> None:
    opened = chat_http(
        api,
        tenant,
        chat_body("cap-generative", user("my loyalty number is LN-7781"), user=REF),
        keyed(KEY, PRINCIPAL),
    )
    assert opened.status == 200, opened.body
    session_id = opened.body["convo"]["sessionId"]
    assert items_naming(every_item(api)["ConversationsTable"], [KEY])  # the key item exists

    response = api.call("POST", "/v1/erasures", token=tenant.token, json_body={"externalRef": REF})
    assert response.status == 202, response.body
    # At once: the key's session is gone from every door, the OpenAI-compatible one too.
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 404
    by_id = chat_http(
        api,
        tenant,
        chat_body("cap-generative", user("still there?")),
        {"X-Convo-Session-Id": session_id},
    )
    assert by_id.status == 404 and by_id.body["error"]["code"] == "session_not_found"

    run_erasure_jobs(api, sweeps=True)
    done = api.call("GET", f"/v1/erasures/{response.body['id']}", token=tenant.token).body
    assert done["status"] == "done" and done["sessionsErased"] == 1

    tables = every_item(api)
    leftovers = [
        item
        for items in tables.values()
        for item in items_naming(items, [KEY, session_id, "LN-7781", "u_erased"])
    ]
    assert leftovers == []
    # The app's key was released: the next call with it opens a new session.
    again = chat_http(
        api,
        tenant,
        chat_body("cap-generative", user("hello again"), user="customer-new"),
        keyed(KEY),
    )
    assert again.status == 200, again.body
    assert again.body["convo"]["sessionId"] != session_id


def test_the_key_right_after_the_request_opens_a_new_session_the_erasure_keeps(
    api: InProcessApi, tenant: Tenant
) -> None:
    first = chat_http(
        api, tenant, chat_body("cap-generative", user("hi"), user=REF), keyed(KEY, PRINCIPAL)
    )
    assert first.status == 200, first.body
    old = first.body["convo"]["sessionId"]
    response = api.call("POST", "/v1/erasures", token=tenant.token, json_body={"externalRef": REF})
    assert response.status == 202, response.body

    # The key's session is claimed by the erasure: the key opens a new one (created after
    # the request, so the erasure is not its to erase), never a 5xx.
    again = chat_http(
        api, tenant, chat_body("cap-generative", user("hi again"), user=REF), keyed(KEY, PRINCIPAL)
    )
    assert again.status == 200, again.body
    new = again.body["convo"]["sessionId"]
    assert new != old

    run_erasure_jobs(api, sweeps=True)
    assert api.call("GET", f"/v1/sessions/{old}", token=tenant.token).status == 404
    kept = api.call("GET", f"/v1/sessions/{new}", token=tenant.token)
    assert kept.status == 200 and kept.body["sessionKey"] == KEY
