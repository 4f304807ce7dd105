"""The erasure routes' edges over moto (reads per workspace, no whole-table scans): bad
bodies are the contract's 4xx, receipts are per workspace, a keyed turn names the very
idempotency record Powertools writes (so that an erasure can remove it), and a failed
agent run can be found by its session."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.adapters.dynamo import items
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session


def erase(api: InProcessApi, tenant: Tenant, body: Any, raw: bytes | None = None) -> Any:
    if raw is not None:
        return api.call("POST", "/v1/erasures", token=tenant.token, raw_body=raw)
    return api.call("POST", "/v1/erasures", token=tenant.token, json_body=body)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, "validation_error"),
        ({"externalRef": ""}, 422, "validation_error"),
        ({"externalRef": "x" * 257}, 422, "validation_error"),
        ({"externalRef": "customer-1", "traces": "burn"}, 422, "validation_error"),
        ({"externalRef": "customer-1", "sessionIds": ["ses_1"]}, 422, "validation_error"),
        ({"externalRef": "\ud800"}, 422, "validation_error"),
        ([], 400, "invalid_json"),
    ],
)
def test_a_bad_erasure_request_is_refused_with_the_contracts_error(
    api: InProcessApi, tenant: Tenant, body: Any, status: int, code: str
) -> None:
    session_id = open_session(api, tenant, externalRef="customer-1")

    refused = erase(api, tenant, body)

    assert (refused.status, refused.body["error"]["code"]) == (status, code)
    # Nothing was erased.
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 200


def test_a_request_without_a_token_is_401(api: InProcessApi) -> None:
    refused = api.call("POST", "/v1/erasures", json_body={"externalRef": "customer-1"})

    assert refused.status == 401


def test_a_receipt_is_read_back_in_its_workspace_only(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    made = erase(api, tenant, {"externalRef": "customer-9", "traces": "erase"})
    assert made.status == 202
    erasure_id = made.body["id"]

    mine = api.call("GET", f"/v1/erasures/{erasure_id}", token=tenant.token)
    theirs = api.call("GET", f"/v1/erasures/{erasure_id}", token=other_tenant.token)
    unknown = api.call("GET", "/v1/erasures/era_00000000000000000000", token=tenant.token)
    odd = api.call("GET", "/v1/erasures/%3Cscript%3E", token=tenant.token)

    assert mine.status == 200 and mine.body["id"] == erasure_id
    assert set(mine.body) == {
        "id",
        "externalRef",
        "traces",
        "status",
        "createdAt",
        "finishedAt",
        "sessionsErased",
        "tracesErased",
        "tracesKept",
    }
    assert (mine.body["externalRef"], mine.body["traces"]) == ("customer-9", "erase")
    for answer in (theirs, unknown, odd):
        assert (answer.status, answer.body["error"]["code"]) == (404, "not_found")


def test_a_keyed_turn_names_the_idempotency_record_powertools_wrote(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    runner = api.container.infrastructure.idempotency
    assert runner is not None

    answered = api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": "hello"},
        headers={"Idempotency-Key": "order-42-msg-1"},
    )

    assert answered.status == 200
    dynamodb = api.container.infrastructure.clients["dynamodb"]
    record_id = runner.record_id(f"{tenant.workspace_id}#order-42-msg-1")
    record = dynamodb.get_item(
        TableName=api.container.settings.idempotency_table_name, Key={"id": {"S": record_id}}
    ).get("Item")
    assert record is not None and record["status"]["S"] == "COMPLETED"
    turn = dynamodb.get_item(
        TableName=api.container.settings.table_name, Key=items.turn_key(session_id, 1)
    )["Item"]
    assert turn["k"]["S"] == record_id


def test_a_key_is_one_record_on_every_door(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    key = {"Idempotency-Key": "shared-key-1"}
    first = api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": "hello"},
        headers=key,
    )

    other_door = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body={"input": "hello", "sessionId": session_id},
        headers=key,
    )

    assert first.status == 200
    assert (other_door.status, other_door.body["error"]["code"]) == (422, "idempotency_key_reused")


def test_a_failed_agent_run_is_found_by_its_session(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant, "cap-agent")
    runs = api.container.adapters.stores.runs
    runs.put_run(
        {"runId": "run_fails_0001", "workspaceId": tenant.workspace_id, "sessionId": session_id}
        | {"status": "failed"}
    )
    runs.put_run(
        {"runId": "run_fine_0001", "workspaceId": tenant.workspace_id, "sessionId": session_id}
        | {"status": "completed"}
    )

    # The failed run (in no transcript) through the index; a completed one is named by
    # its turn item instead, so it is not in the index.
    assert api.container.adapters.stores.erasures.session_runs(session_id) == ["run_fails_0001"]
