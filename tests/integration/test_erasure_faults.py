"""An erasure job interrupted after each of its writes in turn (the next write fails, as a
crash or an outage would end it there) is finished by its redelivery with the same
result as an uninterrupted job: the same receipt, nothing of the end user left, everyone
else untouched. And a job that fails on every delivery says ``failed`` only on its last,
and a redrive finishes it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.adapters.dynamo import items
from tests.support.erasure_jobs import invoke_worker, job_record, receive_jobs
from tests.support.faults import dynamodb_error
from tests.support.inprocess_api import AwsBackend, InProcessApi, new_workspace, serving
from tests.support.tenants import Tenant, open_session, predict, transcript

REF = "customer-4471"
PRINCIPAL = {"tenant_id": "store-a", "user_id": "u_913"}
# What changes state: a job "after its n-th write" has made exactly these n calls.
WRITES = {
    "dynamodb": {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"},
    "sqs": {"SendMessage"},
}


@pytest.fixture
def api(backend: AwsBackend) -> Iterator[InProcessApi]:
    # The job's last listing waits for the index to settle: no waiting here (the clock
    # still runs, so it lists once more and ends).
    with serving(backend, sleep=lambda seconds: None) as stack:
        yield stack


class WriteFaults:
    """Counts the writes made while ``armed``. From the ``fail_at``-th (1-based) on, every
    write fails with a 5xx: the job dies right after its previous write, as a crash would
    end it (its parallel steps included). Or every ``fail_every`` request fails (an
    outage of one kind of request)."""

    def __init__(self, api: InProcessApi) -> None:
        self.armed = False
        self.fail_at: int | None = None
        self.fail_every: str | None = None
        self.writes: list[str] = []
        self._clients = {
            "dynamodb": api.container.infrastructure.clients["dynamodb"],
            "sqs": api.container.infrastructure.clients["sqs"],
        }
        for service, client in self._clients.items():
            client.meta.events.register_first(f"before-call.{service}", self._before)

    def _before(self, model: Any, **_: Any) -> Any:
        service = model.service_model.service_name
        if not self.armed or model.name not in WRITES.get(service, set()):
            return None
        self.writes.append(f"{service}:{model.name}")
        crashed = self.fail_at is not None and len(self.writes) >= self.fail_at
        if crashed or model.name == self.fail_every:
            return dynamodb_error("InternalServerError", 500)
        return None

    def close(self) -> None:
        for service, client in self._clients.items():
            client.meta.events.unregister(f"before-call.{service}", self._before)


def scenario(api: InProcessApi, name: str) -> tuple[Tenant, list[str], str, dict[str, Any]]:
    """A workspace of its own: three sessions of REF (keyed turns, an agent turn and a
    failed agent run), one of another end user, and the erasure requested with its
    traces. The sessions, the other one, and the job's body."""
    tenant = Tenant(*new_workspace(api, name))
    sessions = [open_session(api, tenant, externalRef=REF, principal=PRINCIPAL) for _ in range(2)]
    sessions.append(open_session(api, tenant, "cap-agent", externalRef=REF, principal=PRINCIPAL))
    for index, session_id in enumerate(sessions[:2]):
        turn = api.call(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            token=tenant.token,
            json_body={"input": "card 4242"},
            headers={"Idempotency-Key": f"{name}-{index}"},
        )
        assert turn.status == 200
    assert predict(api, tenant, sessions[2], "Where is order 12345?", cap="cap-agent").status == 200
    api.container.adapters.stores.runs.put_run(
        {
            "runId": f"run_failed_{name}",
            "workspaceId": tenant.workspace_id,
            "sessionId": sessions[2],
            "status": "failed",
        }
    )
    other = open_session(api, tenant, externalRef="customer-other")
    assert predict(api, tenant, other, "hello").status == 200
    requested = api.call(
        "POST",
        "/v1/erasures",
        token=tenant.token,
        json_body={"externalRef": REF, "traces": "erase"},
    )
    assert requested.status == 202
    jobs = [json.loads(record["body"]) for record in receive_jobs(api)]
    (job,) = [body for body in jobs if body.get("erasureId") == requested.body["id"]]
    return tenant, sessions, other, job


def outcome(
    api: InProcessApi, tenant: Tenant, sessions: list[str], job: dict[str, Any]
) -> dict[str, Any]:
    """The receipt's counts and status, and what is left of the end user's sessions."""
    receipt = api.container.adapters.stores.erasures.get_erasure(
        tenant.workspace_id, job["erasureId"]
    )
    assert receipt is not None
    dynamodb, table = (
        api.container.infrastructure.clients["dynamodb"],
        api.container.settings.table_name,
    )
    left = {
        session_id: dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": items.session_pk(session_id)},
            ConsistentRead=True,
        )["Items"]
        for session_id in sessions
    }
    return {
        "status": receipt.status,
        "sessionsErased": receipt.sessions_erased,
        "tracesErased": receipt.traces_erased,
        "tracesKept": receipt.traces_kept,
        "left": {sid: items for sid, items in left.items() if items},
    }


def test_redelivery_finishes_a_job_interrupted_after_each_of_its_writes(
    api: InProcessApi,
) -> None:
    faults = WriteFaults(api)
    try:
        tenant, sessions, other, job = scenario(api, "reference")
        before_other = transcript(api, tenant, other)
        faults.armed = True
        assert invoke_worker(api, job_record(job))
        faults.armed = False
        writes = list(faults.writes)
        expected = outcome(api, tenant, sessions, job)
        assert expected == {
            "status": "done",
            "sessionsErased": 3,
            "tracesErased": 2,
            "tracesKept": 0,
            "left": {},
        }
        assert len(writes) > 10, writes  # claims, traces, records, items, heads, sweeps

        for nth in range(1, len(writes) + 1):
            tenant, sessions, other, job = scenario(api, f"cut-{nth}")
            before_other = transcript(api, tenant, other)
            faults.writes, faults.fail_at, faults.armed = [], nth, True
            interrupted = invoke_worker(api, job_record(job, deliveries=1))
            faults.armed, faults.fail_at = False, None

            assert not interrupted, f"a crash at write {nth} did not stop the job"
            assert invoke_worker(api, job_record(job, deliveries=2))
            assert outcome(api, tenant, sessions, job) == expected, f"cut at write {nth}"
            assert transcript(api, tenant, other) == before_other
            for session_id in sessions:
                got = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
                assert got.status == 404
    finally:
        faults.close()


def test_a_job_failing_every_time_is_failed_on_its_last_delivery_and_a_redrive_finishes_it(
    api: InProcessApi,
) -> None:
    tenant, sessions, _, job = scenario(api, "always-failing")
    last = api.container.settings.erasure_max_receive_count
    faults = WriteFaults(api)
    try:
        # Claims and reads work; removing what it claimed never does.
        faults.armed, faults.fail_every = True, "TransactWriteItems"
        statuses = []
        for delivery in range(1, last + 1):
            faults.writes = []
            assert not invoke_worker(api, job_record(job, deliveries=delivery))
            statuses.append(outcome(api, tenant, sessions, job)["status"])
    finally:
        faults.close()

    assert statuses == ["running"] * (last - 1) + ["failed"]
    failed = api.container.adapters.stores.erasures.get_erasure(
        tenant.workspace_id, job["erasureId"]
    )
    assert failed is not None and failed.finished_at is not None
    # Still unreadable while it waits in the DLQ.
    assert api.call("GET", f"/v1/sessions/{sessions[0]}", token=tenant.token).status == 404

    # Redriven from the DLQ: a first delivery again.
    assert invoke_worker(api, job_record(job, deliveries=1))

    done = outcome(api, tenant, sessions, job)
    assert (done["status"], done["sessionsErased"], done["left"]) == ("done", 3, {})
