"""Erasing an end user over moto, through the real routes and the real worker: every
session of the externalRef is 404 from the 202 on; when the receipt is done, a scan of
every table of the stack finds nothing that names those sessions, the end user or their
principal (the receipt names the end user: that is what it is for), and everyone else's
sessions are as they were. Run traces are kept by default and erased on request."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from convo_memory.adapters.dynamo import items, summary_items
from convo_memory.domain.models import Session, iso_at
from tests.support.erasure_jobs import run_erasure_jobs
from tests.support.inprocess_api import InProcessApi, new_workspace
from tests.support.table_scan import every_item, items_naming
from tests.support.tenants import Tenant, open_session, predict, transcript

# A scan reads every item of the backend: each test gets a backend of its own.
pytestmark = pytest.mark.fresh_stack

REF = "customer-4471"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
# More than one chunk of the job, on two capabilities: three chunks of CHUNK (the job's
# ErasurePolicy.chunk_sessions, 50 when deployed, set small here so the test is quick).
CHUNK = 4
SESSIONS = 10


def erase(api: InProcessApi, tenant: Tenant, traces: str | None = None) -> dict[str, Any]:
    body = {"externalRef": REF} | ({"traces": traces} if traces else {})
    response = api.call("POST", "/v1/erasures", token=tenant.token, json_body=body)
    assert response.status == 202, response.body
    return dict(response.body)


def receipt(api: InProcessApi, tenant: Tenant, erasure_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/v1/erasures/{erasure_id}", token=tenant.token)
    assert response.status == 200, response.body
    return dict(response.body)


def keyed_turn(api: InProcessApi, tenant: Tenant, session_id: str, key: str) -> None:
    response = api.call(
        "POST",
        f"/v1/sessions/{session_id}/messages",
        token=tenant.token,
        json_body={"input": f"my card ends in 4242, session {session_id}"},
        headers={"Idempotency-Key": key},
    )
    assert response.status == 200, response.body


def end_user(api: InProcessApi, tenant: Tenant) -> tuple[list[str], int]:
    """SESSIONS sessions of REF on two capabilities: keyed generative turns, agent turns with
    tool digests and run traces, a failed agent run, summaries and recall text on heads.
    The session ids and how many run traces name them."""
    generative = [
        open_session(api, tenant, externalRef=REF, principal=PRINCIPAL)
        for _ in range(SESSIONS // 2)
    ]
    agent = [
        open_session(api, tenant, "cap-agent", externalRef=REF, principal=PRINCIPAL)
        for _ in range(SESSIONS // 2)
    ]
    for index, session_id in enumerate(generative[:2]):
        keyed_turn(api, tenant, session_id, f"key-{index}")
    runs = 0
    for session_id in agent[:2]:
        answer = predict(api, tenant, session_id, "Where is order 12345?", cap="cap-agent")
        assert answer.status == 200 and answer.body["runId"], answer.body
        runs += 1
    # An agent turn that failed: its trace is in no transcript.
    api.container.adapters.stores.runs.put_run(
        {
            "runId": "run_failed_turn_0001",
            "workspaceId": tenant.workspace_id,
            "sessionId": agent[2],
            "principal": PRINCIPAL,
            "input": "order 9",
            "status": "failed",
        }
    )
    runs += 1
    dynamodb, table = (
        api.container.infrastructure.clients["dynamodb"],
        api.container.settings.table_name,
    )
    for session_id in generative[2:4]:
        summary = summary_items.summary_item(
            session_id, _summary(f"the user {REF} asked about 4242")
        )
        dynamodb.put_item(TableName=table, Item=summary)
        # What a recall would have copied from the end user's other sessions.
        dynamodb.update_item(
            TableName=table,
            Key=items.head_key(session_id),
            UpdateExpression="SET recall = :r",
            ExpressionAttributeValues={":r": {"S": f"earlier, {REF} said 4242"}},
        )
    return generative + agent, runs


def _summary(text: str) -> Any:
    from convo_memory.domain.models import Summary

    return Summary(text=text, through_seq=2)


def others(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> dict[str, tuple[Tenant, list[Any]]]:
    """Another end user of the workspace, and the same externalRef in another workspace:
    each session's owner and transcript."""
    kept: dict[str, tuple[Tenant, list[Any]]] = {}
    for who, cap, ref in (
        (tenant, "cap-generative", "customer-other"),
        (tenant, "cap-agent", "customer-other"),
        (other_tenant, "cap-generative", REF),
        (other_tenant, "cap-agent", REF),
    ):
        session_id = open_session(api, who, cap, externalRef=ref, principal=PRINCIPAL)
        assert predict(api, who, session_id, "Where is order 12345?", cap=cap).status == 200
        kept[session_id] = (who, transcript(api, who, session_id))
    return kept


@pytest.mark.parametrize("traces", ["keep", "erase"])
def test_an_end_user_with_sessions_in_two_chunks_is_erased_and_nobody_else(
    api: InProcessApi,
    tenant: Tenant,
    other_tenant: Tenant,
    traces: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    erasures = api.container.erasures
    monkeypatch.setattr(erasures, "_policy", replace(erasures._policy, chunk_sessions=CHUNK))
    sessions, runs = end_user(api, tenant)
    kept = others(api, tenant, other_tenant)
    runs_before = len(every_item(api)["RunsTable"])

    requested = erase(api, tenant, None if traces == "keep" else traces)

    # Effective at once, before the job ran: 404 everywhere, unlisted, no turn.
    assert requested["status"] == "pending" and requested["traces"] == traces
    for session_id in sessions:
        got = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
        assert (got.status, got.body["error"]["code"]) == (404, "session_not_found")
    for path in ("/messages", "/context"):
        got = api.call("GET", f"/v1/sessions/{sessions[0]}{path}", token=tenant.token)
        assert got.status == 404, path
    listed = api.call("GET", "/v1/sessions", token=tenant.token, query={"externalRef": REF})
    assert listed.body["sessions"] == []
    assert predict(api, tenant, sessions[0], "still there?").status == 404
    assert predict(api, tenant, sessions[-1], "still there?", cap="cap-agent").status == 404
    patched = api.call(
        "PATCH", f"/v1/sessions/{sessions[1]}", token=tenant.token, json_body={"metadata": {}}
    )
    assert patched.status == 404
    assert api.call("DELETE", f"/v1/sessions/{sessions[2]}", token=tenant.token).status == 404

    run_erasure_jobs(api, sweeps=True)

    done = receipt(api, tenant, requested["id"])
    assert done["status"] == "done" and done["finishedAt"] >= done["createdAt"]
    assert done["sessionsErased"] == SESSIONS
    if traces == "keep":
        assert (done["tracesKept"], done["tracesErased"]) == (runs, 0)
    else:
        assert (done["tracesKept"], done["tracesErased"]) == (0, runs)
    # Every item of every table, but the receipt and the items of everyone else's
    # sessions (which name their own session; the same externalRef and principal in
    # another workspace are another end user's).
    everything = every_item(api)
    tables = {
        name: [item for item in items if item not in items_naming(items, kept)]
        for name, items in everything.items()
    }
    needles = [*sessions, REF, *PRINCIPAL.values()]
    receipts = [
        item for item in tables["ConversationsTable"] if item["sk"]["S"].startswith("ERASURE#")
    ]
    # The receipt names the end user, and nothing else of them.
    assert len(receipts) == 1 and items_naming(receipts, [REF]) == receipts
    assert items_naming(receipts, [*sessions, *PRINCIPAL.values()]) == []
    rest = [item for item in tables["ConversationsTable"] if item not in receipts]
    assert items_naming(rest, needles) == []
    assert items_naming(tables["IdempotencyTable"], needles) == []
    assert items_naming(tables["TurnLimitsTable"], needles) == []
    if traces == "erase":
        assert items_naming(tables["RunsTable"], needles) == []
        assert len(everything["RunsTable"]) == runs_before - runs
    else:  # the audit record stays
        assert len(items_naming(tables["RunsTable"], sessions)) == runs
        assert len(everything["RunsTable"]) == runs_before
    # Everyone else's sessions are as they were.
    for session_id, (owner, messages) in kept.items():
        assert transcript(api, owner, session_id) == messages


def test_a_session_the_index_shows_only_after_the_request_is_erased_by_the_job(
    api: InProcessApi, tenant: Tenant
) -> None:
    requested = erase(api, tenant)
    # Created (by its createdAt) before the request, but in no listing the request read.
    late = Session(
        id="ses_late0000000000000001",
        workspace_id=tenant.workspace_id,
        capability_id="cap-generative",
        external_ref=REF,
        principal=PRINCIPAL,
        metadata={},
        status="active",
        created_at=requested["createdAt"],
        last_active_at=requested["createdAt"],
        message_count=0,
    )
    api.container.adapters.stores.sessions.create_session(late)
    assert api.call("GET", f"/v1/sessions/{late.id}", token=tenant.token).status == 200
    # And one created after the request: it is not the erasure's.
    after = open_session(api, tenant, externalRef=REF)

    run_erasure_jobs(api, sweeps=True)

    assert api.call("GET", f"/v1/sessions/{late.id}", token=tenant.token).status == 404
    assert receipt(api, tenant, requested["id"])["sessionsErased"] == 1
    assert api.call("GET", f"/v1/sessions/{after}", token=tenant.token).status == 200
    assert items_naming(every_item(api)["ConversationsTable"], [late.id]) == []


def test_a_turn_that_lands_after_the_erasure_is_swept_with_its_trace_and_record(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant, "cap-agent", externalRef=REF, principal=PRINCIPAL)
    requested = erase(api, tenant, "erase")
    run_erasure_jobs(api)  # the job, not yet its sweeps
    assert receipt(api, tenant, requested["id"])["status"] == "done"
    # A turn that read the session before the claim lands now, as an in-flight one would:
    # its item, its digest and its trace.
    from convo_memory.domain.turn_records import TurnRecord

    turn = TurnRecord(
        turn_id="late-turn",
        user_content="order 12345, card 4242",
        answer="shipped",
        withheld=False,
        created_at=iso_at(0),
        digest_tools=("lookup_order",),
        digest_text="order 12345 shipped",
        digest_expires_at=4_000_000_000.0,
        run_id="run_late_turn_000001",
        idempotency_record="turn#late",
    )
    api.container.adapters.stores.turns.append_turn(session_id, 0, turn)
    api.container.adapters.stores.turns.put_digest(session_id, 1, turn)
    api.container.adapters.stores.runs.put_run(
        {"runId": "run_late_turn_000001", "workspaceId": tenant.workspace_id, "status": "ok"}
    )
    assert len(items_naming(every_item(api)["ConversationsTable"], [session_id])) == 2

    ran = run_erasure_jobs(api, sweeps=True)

    assert {job["kind"] for job in ran} == {"sweep"}
    tables = every_item(api)
    assert items_naming(tables["ConversationsTable"], [session_id]) == []
    assert items_naming(tables["RunsTable"], ["run_late_turn_000001"]) == []
    assert receipt(api, tenant, requested["id"])["tracesErased"] == 1


def test_the_erasure_record_of_a_workspace_is_not_anothers(
    api: InProcessApi, tenant: Tenant
) -> None:
    other_workspace, other_token = new_workspace(api, "gamma")
    requested = erase(api, tenant)

    got = api.call("GET", f"/v1/erasures/{requested['id']}", token=other_token)

    assert (got.status, got.body["error"]["code"]) == (404, "not_found")
    assert other_workspace != tenant.workspace_id
    assert json.dumps(got.body).find(REF) == -1
