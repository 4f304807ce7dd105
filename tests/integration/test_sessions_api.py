"""Session routes through the real handlers under moto."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, predict

PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}


def get_session(api: InProcessApi, tenant: Tenant, session_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
    assert response.status == 200
    return dict(response.body)


def test_create_returns_the_session_with_its_principal(api: InProcessApi, tenant: Tenant) -> None:
    response = api.call(
        "POST",
        "/v1/sessions",
        token=tenant.token,
        json_body={
            "capabilityId": "cap-generative",
            "externalRef": "customer-4471",
            "principal": PRINCIPAL,
            "metadata": {"channel": "web"},
        },
    )
    assert response.status == 201
    body = response.body
    assert body["principal"] == PRINCIPAL and body["externalRef"] == "customer-4471"
    assert body["status"] == "active" and body["messageCount"] == 0
    assert body["metadata"] == {"channel": "web"}
    assert get_session(api, tenant, body["id"]) == body


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"principal": {"tenant_id": "store-b", "user_id": "u_913"}}, "principal_immutable"),
        ({"principal": None}, "principal_immutable"),
        ({"externalRef": "customer-9999"}, "external_ref_immutable"),
        ({"principal": {"tenant_id": "store-b"}, "metadata": {"x": 1}}, "principal_immutable"),
    ],
)
def test_changing_principal_or_external_ref_is_refused_and_nothing_changes(
    api: InProcessApi, tenant: Tenant, change: dict[str, Any], code: str
) -> None:
    session_id = open_session(api, tenant, principal=PRINCIPAL, metadata={"keep": True})
    before = get_session(api, tenant, session_id)
    response = api.call("PATCH", f"/v1/sessions/{session_id}", token=tenant.token, json_body=change)
    assert response.status == 409
    assert response.body["error"]["code"] == code
    assert get_session(api, tenant, session_id) == before


def test_patch_replaces_metadata_and_accepts_unchanged_identity(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant, principal=PRINCIPAL, metadata={"a": 1, "b": 2})
    response = api.call(
        "PATCH",
        f"/v1/sessions/{session_id}",
        token=tenant.token,
        json_body={"metadata": {"c": 3}, "principal": PRINCIPAL, "externalRef": "customer-4471"},
    )
    assert response.status == 200, response.body
    assert response.body["metadata"] == {"c": 3}
    assert get_session(api, tenant, session_id)["metadata"] == {"c": 3}


@pytest.mark.parametrize(
    "body",
    [
        {"capabilityId": "cap-generative"},
        {"capabilityId": "cap-generative", "externalRef": ""},
        {"capabilityId": "cap-generative", "externalRef": "x", "principal": {"tenant_id": 5}},
        {"capabilityId": "cap-generative", "externalRef": "x", "principal": "store-a"},
        {"capabilityId": "cap-generative", "externalRef": "x", "metadata": []},
    ],
)
def test_create_schema_violations_are_422_and_create_nothing(
    api: InProcessApi, tenant: Tenant, body: dict[str, Any]
) -> None:
    response = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)
    assert response.status == 422
    assert response.body["error"]["code"] == "validation_error"
    assert response.body["error"]["details"]
    listing = api.call("GET", "/v1/sessions", token=tenant.token, query={"externalRef": "x"})
    assert listing.body["sessions"] == []


def test_patch_with_bad_json_or_schema_leaves_the_session_unchanged(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant, metadata={"keep": True})
    before = get_session(api, tenant, session_id)
    bad_json = api.call("PATCH", f"/v1/sessions/{session_id}", token=tenant.token, raw_body="{")
    bad_schema = api.call(
        "PATCH", f"/v1/sessions/{session_id}", token=tenant.token, json_body={"metadata": "nope"}
    )
    assert (bad_json.status, bad_json.body["error"]["code"]) == (400, "invalid_json")
    assert (bad_schema.status, bad_schema.body["error"]["code"]) == (422, "validation_error")
    assert get_session(api, tenant, session_id) == before


def test_list_by_external_ref_is_newest_first_and_paginates(
    api: InProcessApi, tenant: Tenant
) -> None:
    ids = [open_session(api, tenant) for _ in range(5)]
    open_session(api, tenant, externalRef="someone-else")
    seen: list[str] = []
    token = None
    while True:
        query: dict[str, Any] = {"externalRef": "customer-4471", "limit": 2}
        if token:
            query["nextToken"] = token
        page = api.call("GET", "/v1/sessions", token=tenant.token, query=query)
        assert page.status == 200
        seen += [s["id"] for s in page.body["sessions"]]
        token = page.body["nextToken"]
        if not token:
            break
    assert seen == list(reversed(ids))
    assert api.call("GET", "/v1/sessions", token=tenant.token).status == 422


def test_messages_paginate_oldest_first(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    for i in range(3):
        predict(api, tenant, session_id, f"turn {i}")
    first = api.call(
        "GET", f"/v1/sessions/{session_id}/messages", token=tenant.token, query={"limit": 4}
    )
    assert [m["seq"] for m in first.body["messages"]] == [1, 2, 3, 4]
    second = api.call(
        "GET",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        query={"limit": 4, "nextToken": first.body["nextToken"]},
    )
    assert [m["seq"] for m in second.body["messages"]] == [5, 6]
    assert second.body["nextToken"] is None
    for bad in ({"limit": 0}, {"limit": 101}, {"limit": "ten"}, {"nextToken": "garbage!"}):
        response = api.call(
            "GET", f"/v1/sessions/{session_id}/messages", token=tenant.token, query=bad
        )
        assert response.status == 422, bad


def test_delete_removes_the_conversation(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    predict(api, tenant, session_id, "remember me")
    assert api.call("DELETE", f"/v1/sessions/{session_id}", token=tenant.token).status == 204
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 404
    assert api.call("GET", f"/v1/sessions/{session_id}/messages", token=tenant.token).status == 404
    leftovers = partition_items(api, session_id)
    # Only the emptied head is left, marked deleted, until the retention run removes it
    # (once no turn that was already in flight can land any more).
    assert [(i["sk"]["S"], i["status"]["S"]) for i in leftovers] == [("SESSION", "deleting")]
    assert not any("remember me" in json.dumps(item) for item in leftovers)
    later = datetime.now(UTC) + timedelta(seconds=api.container.settings.deletion_grace_seconds + 1)
    report = api.container.retention.run(later)
    assert report.deletions_finished == 1
    assert partition_items(api, session_id) == []


def partition_items(api: InProcessApi, session_id: str) -> list[dict[str, Any]]:
    out = api.container.infrastructure.clients["dynamodb"].query(
        TableName=api.container.settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"SESSION#{session_id}"}},
        ConsistentRead=True,
    )
    items: list[dict[str, Any]] = out["Items"]
    return items


def test_unknown_route_and_missing_or_unknown_token(api: InProcessApi, tenant: Tenant) -> None:
    unknown_token = api.call("GET", "/v1/capabilities", token="not-a-real-token-at-all")
    assert unknown_token.status == 401
    assert unknown_token.body["error"]["code"] == "unauthorized"
    assert api.call("GET", "/v1/capabilities", token=None).status == 401


def test_an_unknown_route_answers_the_contract_404_with_or_without_a_token(
    api: InProcessApi, tenant: Tenant
) -> None:
    for token in (None, tenant.token):
        response = api.call("GET", "/v1/nothing-here", token=token)
        assert response.status == 404
        assert response.body["error"]["code"] == "not_found"
