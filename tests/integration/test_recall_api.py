"""Recall across an end user's sessions through the real handlers under moto: the
capability's ``recall`` (validated, shown), a fact of session one in session two's
prompt as the model receives it, the context view, what never crosses, deletions (also
one racing the creation), and what it costs: nothing per turn, a bounded creation."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.domain.prompt import Prompt
from tests.support.dynamo_meter import DynamoMeter
from tests.support.inprocess_api import InProcessApi
from tests.support.prompts import nonce_blind
from tests.support.tenants import Tenant

ALICE = {"tenant_id": "store-a", "user_id": "alice"}


class _Recording:
    """A capability's provider that keeps every prompt it is given."""

    def __init__(self, inner: Any, prompts: list[Prompt]) -> None:
        self._inner, self._prompts = inner, prompts

    def complete(self, prompt: Prompt) -> Any:
        self._prompts.append(prompt)
        return self._inner.complete(prompt)

    def stream(self, prompt: Prompt) -> Any:
        self._prompts.append(prompt)
        return self._inner.stream(prompt)


@pytest.fixture
def prompts(api: InProcessApi) -> Iterator[list[Prompt]]:
    """The prompts the model received during the test."""
    seen: list[Prompt] = []
    registry = api.container.infrastructure.registry
    build = registry.provider
    registry.provider = lambda *a, **kw: _Recording(build(*a, **kw), seen)  # type: ignore[method-assign]
    yield seen


def capability(api: InProcessApi, tenant: Tenant, **extra: Any) -> str:
    body = {"name": "remembers", "kind": "generative", **extra}
    response = api.call("POST", "/v1/capabilities", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def open_session(
    api: InProcessApi, tenant: Tenant, cap: str, ref: str, principal: Any = ALICE
) -> str:
    body = {"capabilityId": cap, "externalRef": ref, "principal": principal}
    response = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    assert "recall" not in response.body  # the Session JSON never carries it
    return str(response.body["id"])


def say(api: InProcessApi, tenant: Tenant, session_id: str, text: str) -> dict[str, Any]:
    response = api.call(
        "POST", f"/v1/sessions/{session_id}/messages", token=tenant.token, json_body={"input": text}
    )
    assert response.status == 200, response.body
    return dict(response.body)


def recall_of(api: InProcessApi, tenant: Tenant, session_id: str) -> Any:
    response = api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token)
    assert response.status == 200, response.body
    return response.body["recall"]


def fenced_recall(prompt: Prompt) -> list[str]:
    nonce = re.escape(prompt.fence_nonce)
    return re.findall(
        rf'<data-{nonce} kind="recall">\n(.*?)\n</data-{nonce}>', prompt.system, re.DOTALL
    )


def a_fact() -> str:
    return f"My locker code is {uuid.uuid4().hex[:10]}."


def stored_text(api: InProcessApi) -> str:
    """Every item of the conversations table, as one text."""
    client = api.container.infrastructure.clients["dynamodb"]
    table = api.resources.tables["ConversationsTable"]
    pages = client.get_paginator("scan").paginate(TableName=table)
    return repr([item for page in pages for item in page["Items"]])


# -- the capability --------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "classic", "recall": {"sessions": 1}},
        {"recall": {"sessions": 0}},
        {"recall": {"sessions": 6}},
        {"recall": {"sessions": 2, "maxChars": 8_001}},
        {"recall": {"sessions": 2, "maxChars": 99}},
        {"recall": {"maxChars": 2_000}},
        {"recall": {"sessions": 2, "maxSessions": 3}},
        {"recall": {"sessions": "2x"}},
    ],
)
def test_a_recall_out_of_range_or_on_a_classic_capability_is_422(
    api: InProcessApi, tenant: Tenant, body: dict[str, Any]
) -> None:
    response = api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={"name": "x", "kind": "generative", **body},
    )

    assert response.status == 422, response.body
    assert response.body["error"]["code"] == "validation_error"


def test_the_capability_shows_its_recall_with_the_default_budget(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = capability(api, tenant, kind="agent", recall={"sessions": 3})
    plain = capability(api, tenant)

    shown = api.call("GET", f"/v1/capabilities/{cap}", token=tenant.token).body
    assert shown["recall"] == {"sessions": 3, "maxChars": 2_000}
    assert api.call("GET", f"/v1/capabilities/{plain}", token=tenant.token).body["recall"] is None


# -- what is recalled --------------------------------------------------------------------


def test_a_fact_of_session_one_reaches_session_twos_prompt_as_fenced_data(
    api: InProcessApi, tenant: Tenant, prompts: list[Prompt]
) -> None:
    cap = capability(api, tenant, recall={"sessions": 2})
    fact = a_fact()
    first = open_session(api, tenant, cap, "customer-1")
    say(api, tenant, first, fact)

    second = open_session(api, tenant, cap, "customer-1")
    prompts.clear()
    answer = say(api, tenant, second, "What is my locker code?")

    (prompt,) = prompts
    (recalled,) = fenced_recall(prompt)
    assert fact in recalled
    assert [m.content for m in prompt.messages] == ["What is my locker code?"]
    assert "I also recall what you told me in earlier conversations." in answer["output"]
    recall = recall_of(api, tenant, second)
    assert recall["fromSessions"] == [first] and fact in recall["text"]
    assert recall_of(api, tenant, first) is None


@pytest.mark.parametrize(
    "other", ["externalRef", "principal", "no-principal", "capability", "workspace"]
)
def test_nothing_crosses_to_another_end_user_principal_capability_or_workspace(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant, prompts: list[Prompt], other: str
) -> None:
    cap = capability(api, tenant, recall={"sessions": 5})
    fact = a_fact()
    say(api, tenant, open_session(api, tenant, cap, "customer-1"), fact)

    owner, second_cap, ref = tenant, cap, "customer-1"
    principal: dict[str, str] | None = ALICE
    if other == "externalRef":
        ref = "customer-2"
    elif other == "principal":
        principal = {"tenant_id": "store-a", "user_id": "mallory"}
    elif other == "no-principal":
        principal = None
    elif other == "capability":
        second_cap = capability(api, tenant, recall={"sessions": 5})
    else:
        owner = other_tenant
        second_cap = capability(api, other_tenant, recall={"sessions": 5})
    second = open_session(api, owner, second_cap, ref, principal)
    prompts.clear()
    say(api, owner, second, "What do you know about me?")

    assert recall_of(api, owner, second) is None
    assert fact not in prompts[0].system and fenced_recall(prompts[0]) == []


def test_without_recall_earlier_sessions_change_nothing_in_the_prompt(
    api: InProcessApi, tenant: Tenant, prompts: list[Prompt]
) -> None:
    cap = capability(api, tenant, instructions="Be brief.")
    seen = []
    for ref in ("newcomer", "regular"):
        if ref == "regular":
            say(api, tenant, open_session(api, tenant, cap, ref), a_fact())
        session_id = open_session(api, tenant, cap, ref)
        prompts.clear()
        say(api, tenant, session_id, "Hello?")
        seen.append(nonce_blind(prompts[0]))
        assert recall_of(api, tenant, session_id) is None

    assert seen[0] == seen[1]
    assert seen[0][0].startswith("Be brief.") and 'kind="recall"' not in seen[0][0]


# -- forgetting ------------------------------------------------------------------------------


def test_a_deleted_session_is_never_recalled_and_takes_its_own_recall_along(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = capability(api, tenant, recall={"sessions": 2})
    fact = a_fact()
    first = open_session(api, tenant, cap, "customer-1")
    say(api, tenant, first, fact)
    second = open_session(api, tenant, cap, "customer-1")
    assert fact in recall_of(api, tenant, second)["text"]

    for session_id in (first, second):
        response = api.call("DELETE", f"/v1/sessions/{session_id}", token=tenant.token)
        assert response.status == 204
    third = open_session(api, tenant, cap, "customer-1")

    assert recall_of(api, tenant, third) is None
    assert fact not in stored_text(api)  # nor in the second session's tombstone


def test_a_purge_by_retention_takes_the_recall_with_its_first_step(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = capability(api, tenant, recall={"sessions": 1})
    fact = a_fact()
    say(api, tenant, open_session(api, tenant, cap, "customer-1"), fact)
    recalling = open_session(api, tenant, cap, "customer-1")
    client = api.container.infrastructure.clients["dynamodb"]
    key = {"pk": {"S": f"SESSION#{recalling}"}, "sk": {"S": "SESSION"}}
    table = api.resources.tables["ConversationsTable"]
    head = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert fact in head["recall"]["S"]
    retention = api.container.adapters.stores.retention

    assert retention.archive_session(recalling, head["lastActiveAt"]["S"], "2030-01-01")
    assert retention.begin_purge(recalling, "2030-01-01", "2030-02-01")

    purged = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert purged["status"]["S"] == "deleting" and "recall" not in purged


def test_a_deletion_landing_between_the_read_and_the_write_wins(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = capability(api, tenant, recall={"sessions": 2})
    kept_fact, doomed_fact = a_fact(), a_fact()
    kept = open_session(api, tenant, cap, "customer-1")
    say(api, tenant, kept, kept_fact)
    doomed = open_session(api, tenant, cap, "customer-1")
    say(api, tenant, doomed, doomed_fact)
    client = api.container.infrastructure.clients["dynamodb"]
    event = "before-call.dynamodb.TransactWriteItems"
    deleted: list[int] = []

    def delete_first(**_: Any) -> None:
        if not deleted:  # once: the retry takes the recall again, without it
            response = api.call("DELETE", f"/v1/sessions/{doomed}", token=tenant.token)
            deleted.append(response.status)

    client.meta.events.register(event, delete_first)
    try:
        new = open_session(api, tenant, cap, "customer-1")
    finally:
        client.meta.events.unregister(event, delete_first)

    assert deleted == [204]
    recall = recall_of(api, tenant, new)
    assert recall["fromSessions"] == [kept] and kept_fact in recall["text"]
    assert doomed_fact not in stored_text(api)


# -- costs -------------------------------------------------------------------------------------


def test_a_turn_of_a_recalling_session_makes_no_extra_request(
    api: InProcessApi, tenant: Tenant
) -> None:
    recalling_cap = capability(api, tenant, recall={"sessions": 5})
    plain_cap = capability(api, tenant)
    say(api, tenant, open_session(api, tenant, recalling_cap, "customer-1"), a_fact())
    recalling = open_session(api, tenant, recalling_cap, "customer-1")
    plain = open_session(api, tenant, plain_cap, "customer-1")
    assert recall_of(api, tenant, recalling) is not None
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])
    requests = {}
    for name, session_id in (("recall", recalling), ("plain", plain)):
        say(api, tenant, session_id, "warm-up")
        meter.reset()
        say(api, tenant, session_id, "the measured turn")
        requests[name] = dict(meter.requests)

    # One read of the window (the head, with its recall), one put of the turn, and the
    # workspace's turn counter.
    assert requests["recall"] == requests["plain"] == {"Query": 1, "PutItem": 1, "UpdateItem": 1}


def test_opening_a_session_with_recall_of_five_costs_one_listing_and_five_reads(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = capability(api, tenant, recall={"sessions": 5})
    plain_cap = capability(api, tenant)
    for i in range(7):
        say(api, tenant, open_session(api, tenant, cap, "customer-1"), f"session {i}")
    open_session(api, tenant, plain_cap, "customer-1")  # warms the capability cache
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])

    recalling = open_session(api, tenant, cap, "customer-1")
    with_recall = dict(meter.requests)
    meter.reset()
    open_session(api, tenant, plain_cap, "customer-1")
    without = dict(meter.requests)

    assert len(recall_of(api, tenant, recalling)["fromSessions"]) == 5
    assert with_recall == {"Query": 1 + 5, "TransactWriteItems": 1}
    assert without == {"PutItem": 1}
