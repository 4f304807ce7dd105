"""Deleting a conversation always finishes: the session is marked deleted first (404 at
once), its items are removed, the head goes last; an interruption at any step is
finished by a retry of the DELETE or by the retention run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.faults import dynamodb_error, inject
from tests.support.inprocess_api import InProcessApi, seed_history
from tests.support.tenants import Tenant, open_session, predict

# The retention run finishes every pending deletion of the table: a table per test.
pytestmark = pytest.mark.fresh_stack


def fail_nth(client: Any, operation: str, nth: int) -> Callable[[], None]:
    """Make the ``nth`` call of ``operation`` (1-based) fail with a DynamoDB 5xx, as an
    interruption would; returns a function that removes the fault."""
    calls = {"n": 0}

    def fault(params: dict[str, Any]) -> Any:
        calls["n"] += 1
        return dynamodb_error("InternalServerError", 500) if calls["n"] == nth else None

    return inject(client, operation, fault)


def stored_keys(api: InProcessApi, session_id: str) -> list[str]:
    out = api.container.clients["dynamodb"].query(
        TableName=api.container.settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"SESSION#{session_id}"}},
        ConsistentRead=True,
    )
    return [item["sk"]["S"] for item in out["Items"]]


def long_conversation(api: InProcessApi, tenant: Tenant) -> str:
    """A session whose items need several batch deletions (25 keys each)."""
    session_id = open_session(api, tenant, capability="cap-agent")
    seed_history(api, session_id, 60)
    assert predict(api, tenant, session_id, "Where is order 12345?", cap="cap-agent").status == 200
    assert len(stored_keys(api, session_id)) == 30 + 1 + 1 + 1  # turns, digest, head, ...
    return session_id


def delete(api: InProcessApi, tenant: Tenant, session_id: str) -> int:
    return api.call("DELETE", f"/v1/sessions/{session_id}", token=tenant.token).status


def retention_after_grace(api: InProcessApi) -> dict[str, Any]:
    grace = api.container.settings.deletion_grace_seconds
    report = api.container.retention.run(datetime.now(UTC) + timedelta(seconds=grace + 1))
    return report.to_dict()


def test_an_interrupted_mark_leaves_the_session_whole_and_a_retry_deletes_it(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = long_conversation(api, tenant)
    heal = fail_nth(api.container.clients["dynamodb"], "UpdateItem", 1)

    assert delete(api, tenant, session_id) == 503
    heal()
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 200

    assert delete(api, tenant, session_id) == 204
    assert stored_keys(api, session_id) == ["SESSION"]
    assert retention_after_grace(api)["deletionsFinished"] == 1
    assert stored_keys(api, session_id) == []


@pytest.mark.parametrize("finisher", ["retry", "retention"])
def test_an_interrupted_sweep_is_finished_by_a_retry_or_by_retention(
    api: InProcessApi, tenant: Tenant, finisher: str
) -> None:
    session_id = long_conversation(api, tenant)
    heal = fail_nth(api.container.clients["dynamodb"], "BatchWriteItem", 2)

    assert delete(api, tenant, session_id) == 503
    heal()
    # Marked first: the conversation is gone for every reader at once.
    for path in ("", "/messages", "/context"):
        got = api.call("GET", f"/v1/sessions/{session_id}{path}", token=tenant.token)
        assert got.status == 404, path
    turn = predict(api, tenant, session_id, "still there?", cap="cap-agent")
    assert turn.status == 404
    left = stored_keys(api, session_id)
    assert "SESSION" in left and 1 < len(left) < 33  # one batch went, the rest did not

    if finisher == "retry":
        assert delete(api, tenant, session_id) == 204  # resumes
        assert stored_keys(api, session_id) == ["SESSION"]
    report = retention_after_grace(api)

    assert report["deletionsFinished"] == 1
    assert stored_keys(api, session_id) == []
    assert delete(api, tenant, session_id) == 404


def test_retention_cut_short_while_removing_the_head_finishes_next_time(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = long_conversation(api, tenant)
    assert delete(api, tenant, session_id) == 204
    heal = fail_nth(api.container.clients["dynamodb"], "DeleteItem", 1)

    with pytest.raises(Exception, match="unavailable"):
        retention_after_grace(api)
    heal()
    assert stored_keys(api, session_id) == ["SESSION"]  # the head went last: still indexed

    assert retention_after_grace(api)["deletionsFinished"] == 1
    assert stored_keys(api, session_id) == []


def test_a_deletion_inside_the_grace_period_keeps_only_the_emptied_head(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = long_conversation(api, tenant)
    assert delete(api, tenant, session_id) == 204

    report = api.container.retention.run(datetime.now(UTC) + timedelta(seconds=60))

    assert report.deletions_finished == 0
    assert stored_keys(api, session_id) == ["SESSION"]
