"""The scheduled retention run through its real handler, against moto tables built from
template.yaml: idle sessions archived (readable, refusing turns), archived ones purged,
run traces kept; the byActivity index is what is read."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from convo_memory.adapters.dynamo.items import ACTIVITY_SHARDS
from convo_memory.domain.models import iso
from tests.support.dynamo_meter import DynamoMeter
from tests.support.inprocess_api import InProcessApi
from tests.support.tenants import Tenant, open_session, predict, transcript

# A retention run reads every session of the table: each test needs a table of its own.
pytestmark = pytest.mark.fresh_stack

EVENT = Path(__file__).resolve().parents[2] / "events" / "retention_schedule.json"


def schedule_event(now: datetime) -> dict[str, Any]:
    """The sample schedule event with ``time`` set, in EventBridge's format."""
    event: dict[str, Any] = json.loads(EVENT.read_text())
    event["time"] = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return event


def run_retention(api: InProcessApi, now: datetime) -> dict[str, Any]:
    report: dict[str, Any] = api.invoke("RetentionFunction", schedule_event(now))
    return report


def partition_items(api: InProcessApi, session_id: str) -> list[str]:
    """Every sort key stored under the session's partition (straight from the table)."""
    out = api.container.infrastructure.clients["dynamodb"].query(
        TableName=api.container.settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"SESSION#{session_id}"}},
        ConsistentRead=True,
    )
    return [item["sk"]["S"] for item in out["Items"]]


def agent_session_with_a_run(api: InProcessApi, tenant: Tenant) -> tuple[str, str]:
    session_id = open_session(api, tenant, capability="cap-agent")
    response = predict(api, tenant, session_id, "Where is order 12345?", cap="cap-agent")
    assert response.status == 200, response.body
    return session_id, str(response.body["runId"])


def test_idle_sessions_are_archived_then_purged_and_run_traces_survive(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id, run_id = agent_session_with_a_run(api, tenant)
    idle_generative = open_session(api, tenant)
    assert any(sk.endswith("#DIGEST") for sk in partition_items(api, session_id))
    eight_days_later = datetime.now(UTC) + timedelta(days=8)

    # When the schedule fires 8 days later
    report = run_retention(api, eight_days_later)

    # Then both idle sessions are archived, and stay readable
    assert (report["archived"], report["purged"], report["more"]) == (2, 0, False)
    for sid in (session_id, idle_generative):
        got = api.call("GET", f"/v1/sessions/{sid}", token=tenant.token)
        assert got.status == 200 and got.body["status"] == "archived"
    messages = transcript(api, tenant, session_id)
    assert messages[0]["content"] == "Where is order 12345?"
    assert len(messages) == 2
    # ... and refuse new turns, through either door
    for response in (
        api.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=tenant.token,
            json_body={"input": "Any news?"},
        ),
        predict(api, tenant, session_id, "Any news?", cap="cap-agent"),
    ):
        assert response.status == 409, response.body
        assert response.body["error"]["code"] == "session_archived"
    assert len(transcript(api, tenant, session_id)) == 2

    # When the schedule fires 31 days after the archival
    report = run_retention(api, eight_days_later + timedelta(days=31))

    # Then the conversations are gone, every item of them, but the run trace is not
    assert (report["archived"], report["purged"]) == (0, 2)
    assert report["purgedItems"] >= 1 + 1 + 1  # head, the turn, its digest
    for sid in (session_id, idle_generative):
        assert api.call("GET", f"/v1/sessions/{sid}", token=tenant.token).status == 404
        assert partition_items(api, sid) == []
    run = api.call("GET", f"/v1/runs/{run_id}", token=tenant.token)
    assert run.status == 200, run.body
    assert run.body["sessionId"] == session_id


def test_the_cutoff_is_the_event_time_minus_the_idle_window(
    api: InProcessApi, tenant: Tenant
) -> None:
    idle = open_session(api, tenant)
    assert predict(api, tenant, idle, "hello").status == 200
    # The schedule's time has whole seconds: start the next second, then be active.
    boundary = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(max(0.0, (boundary - datetime.now(UTC)).total_seconds()) + 0.01)
    recent = open_session(api, tenant)
    assert predict(api, tenant, recent, "hello").status == 200

    report = run_retention(api, boundary + timedelta(days=7))

    assert report["archiveBefore"] == iso(boundary)
    assert report["archived"] == 1
    statuses = {
        sid: api.call("GET", f"/v1/sessions/{sid}", token=tenant.token).body["status"]
        for sid in (idle, recent)
    }
    assert statuses == {idle: "archived", recent: "active"}
    assert predict(api, tenant, recent, "still here").status == 200


def test_a_rerun_of_the_same_event_changes_nothing(api: InProcessApi, tenant: Tenant) -> None:
    session_id, _ = agent_session_with_a_run(api, tenant)
    later = datetime.now(UTC) + timedelta(days=8)

    first = run_retention(api, later)
    archived = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body
    again = run_retention(api, later)

    assert (first["archived"], again["archived"], again["archiveSkipped"]) == (1, 0, 0)
    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body == archived


def test_the_run_reads_the_activity_index_and_never_scans(
    api: InProcessApi, tenant: Tenant
) -> None:
    for _ in range(3):
        open_session(api, tenant)
    meter = DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])
    seen: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        seen.append(params)

    api.container.infrastructure.clients["dynamodb"].meta.events.register(
        "provide-client-params.dynamodb.Query", record
    )

    report = run_retention(api, datetime.now(UTC) + timedelta(days=8))

    assert report["archived"] == 3
    assert "Scan" not in meter.requests
    # One page per shard for each of the three states, the paused turns and (v5) the
    # uploads that expire; per candidate, one read of its last turn (the head's activity
    # mark is coarse) and one conditional write.
    assert meter.requests == {"Query": 5 * ACTIVITY_SHARDS + 3, "UpdateItem": 3}
    index_reads = [p for p in seen if "IndexName" in p]
    assert {p["IndexName"] for p in index_reads} == {"byActivity"}
    assert {p["ExpressionAttributeValues"][":p"]["S"] for p in index_reads} == {
        f"{state}#{shard:02d}"
        for state in ("ACTIVE", "ARCHIVED", "DELETING", "PENDING", "FILES")
        for shard in range(ACTIVITY_SHARDS)
    }
    last_turn_reads = [p for p in seen if "IndexName" not in p]
    assert all(p["Limit"] == 1 for p in last_turn_reads) and len(last_turn_reads) == 3


@pytest.mark.parametrize(
    "event",
    [
        {"detail-type": "Scheduled Event", "detail": {}},
        {"time": ""},
        {"time": "yesterday"},
        {"time": "2026-01-01T00:00:00"},
    ],
)
def test_an_event_without_a_usable_time_fails_the_run(
    api: InProcessApi, tenant: Tenant, event: dict[str, Any]
) -> None:
    session_id = open_session(api, tenant)

    # The handler module is loaded under its own name, as Lambda would: match by name.
    with pytest.raises(ValueError, match="`time`") as failure:
        api.invoke("RetentionFunction", event)

    assert type(failure.value).__name__ == "InvalidScheduleEvent"

    assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).body["status"] == (
        "active"
    )
