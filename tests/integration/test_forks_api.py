"""Forks on the in-process stack (moto tables from template.yaml, the real handlers): a
fork is created with a bounded copy whatever its parent's length; its turns cost what
any turn costs; its older inherited messages become its own through the copy job, a
parent's deletion, purge or erasure finishing any copy still due; a fork deleted while
its copy runs keeps nothing once swept; a creation cut short leaves nothing retention
does not remove."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convo_memory.adapters.dynamo import forks as dynamo_forks
from convo_memory.domain.jobs import ForkCopyJob
from tests.support.dynamo_meter import DynamoMeter
from tests.support.erasure_jobs import (
    ack,
    invoke_worker,
    job_record,
    receive_jobs,
    run_erasure_jobs,
    run_fork_copy_jobs,
)
from tests.support.faults import dynamodb_error, inject
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace, seed_history
from tests.support.table_scan import every_item, items_naming
from tests.support.tenants import Tenant, open_session, transcript

# Scans and retention runs read the whole table: a table per test.
pytestmark = pytest.mark.fresh_stack
# The seeded capability replays 20 messages: a fork is created holding 10 turns.
CEILING_TURNS = 10


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "forks"))


def session_with(api: InProcessApi, tenant: Tenant, messages: int) -> str:
    session_id = open_session(api, tenant)
    seed_history(api, session_id, messages)
    return session_id


def fork(api: InProcessApi, tenant: Tenant, session_id: str, at_seq: int, status: int = 201) -> Any:
    response = api.call(
        "POST", f"/v1/sessions/{session_id}/forks", token=tenant.token, json_body={"atSeq": at_seq}
    )
    assert response.status == status, response.body
    return response.body


def stored_turn_seqs(api: InProcessApi, session_id: str) -> list[int]:
    """The user seqs of the turns in the session's own partition."""
    out = api.container.infrastructure.clients["dynamodb"].query(
        TableName=api.container.settings.table_name,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :msg)",
        ExpressionAttributeValues={":pk": {"S": f"SESSION#{session_id}"}, ":msg": {"S": "MSG#"}},
        ConsistentRead=True,
    )
    return [int(item["sk"]["S"][4:14]) for item in out["Items"] if "#DIGEST" not in item["sk"]["S"]]


def conversation_items(api: InProcessApi) -> list[dict[str, Any]]:
    return every_item(api)["ConversationsTable"]


def send(api: InProcessApi, tenant: Tenant, session_id: str, text: str) -> Any:
    response = api.call(
        "POST", f"/v1/sessions/{session_id}/messages", token=tenant.token, json_body={"input": text}
    )
    assert response.status == 200, response.body
    return response.body


def deleted_before_the_next(
    api: InProcessApi, tenant: Tenant, operation: str, session_id: str
) -> Callable[[], None]:
    """Delete ``session_id`` just before the next ``operation`` request goes out (as a
    racing DELETE would land); returns what removes the hook."""
    done: list[bool] = []

    def delete_first(params: dict[str, Any]) -> None:
        if not done:
            done.append(True)
            response = api.call("DELETE", f"/v1/sessions/{session_id}", token=tenant.token)
            assert response.status == 204

    return inject(api.container.infrastructure.clients["dynamodb"], operation, delete_first)


@pytest.fixture
def meter(api: InProcessApi) -> Iterator[DynamoMeter]:
    yield DynamoMeter().attach(api.container.infrastructure.clients["dynamodb"])


# -- cheap ----------------------------------------------------------------------------------


def test_creating_a_fork_makes_the_same_requests_whatever_the_parents_length(
    api: InProcessApi, tenant: Tenant, meter: DynamoMeter
) -> None:
    requests = {}
    for messages in (100, 1000):
        parent = session_with(api, tenant, messages)
        meter.reset()
        created = fork(api, tenant, parent, messages)
        requests[messages] = dict(meter.requests)
        assert stored_turn_seqs(api, created["id"]) == list(
            range(messages - 2 * CEILING_TURNS + 1, messages, 2)
        )

    assert requests[100] == requests[1000]
    assert requests[1000]["BatchWriteItem"] == 1  # ten turns and nothing else
    # The older inherited turns are a job's to copy, one job per fork.
    kinds = [json.loads(job["body"])["kind"] for job in receive_jobs(api, "fork_copy")]
    assert kinds == ["fork_copy", "fork_copy"]
    assert receive_jobs(api) == []  # none on the erasure queue: forks have their own


def test_a_fork_of_a_fork_whose_copy_is_due_does_bounded_work_whatever_its_length(
    api: InProcessApi, tenant: Tenant, meter: DynamoMeter
) -> None:
    requests, grandchildren = {}, {}
    for messages in (60, 300):
        child = fork(api, tenant, session_with(api, tenant, messages), messages)["id"]
        child_turns = stored_turn_seqs(api, child)
        meter.reset()
        grandchildren[messages] = fork(api, tenant, child, messages)["id"]
        requests[messages] = dict(meter.requests)
        # The child's own copy is still due: the request did not do it.
        assert stored_turn_seqs(api, child) == child_turns
        assert stored_turn_seqs(api, grandchildren[messages]) == child_turns

    assert requests[60] == requests[300]
    assert requests[300]["BatchWriteItem"] == 1  # ten turns and nothing else
    # Its copy is queued after its parent's: the job finishes both.
    run_fork_copy_jobs(api)
    for messages, grandchild in grandchildren.items():
        assert stored_turn_seqs(api, grandchild) == list(range(1, messages, 2))
        listed = [m["seq"] for m in transcript(api, tenant, grandchild)]
        assert listed == list(range(1, min(messages, 100) + 1))  # its first page


def test_a_turn_on_a_fork_makes_the_requests_and_reads_of_a_turn_on_any_session(
    api: InProcessApi, tenant: Tenant, meter: DynamoMeter
) -> None:
    plain = session_with(api, tenant, 1000)
    forked = fork(api, tenant, session_with(api, tenant, 1000), 1000)["id"]
    for session_id in (plain, forked):
        send(api, tenant, session_id, "warm-up")  # the capability is cached from here on

    measured = {}
    for session_id in (plain, forked):
        meter.reset()
        send(api, tenant, session_id, "And what about the other one?")
        measured[session_id] = (dict(meter.requests), meter.items_read)

    assert measured[forked] == measured[plain]
    assert measured[forked][0]["Query"] == 1


# -- the copy ---------------------------------------------------------------------------------


def test_the_copy_job_makes_every_inherited_message_the_forks_own(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    forked = fork(api, tenant, parent, 60)["id"]
    [job] = run_fork_copy_jobs(api)

    assert (job["parentId"], job["forkId"]) == (parent, forked)
    assert stored_turn_seqs(api, forked) == list(range(1, 60, 2))
    assert [m["seq"] for m in transcript(api, tenant, forked)] == list(range(1, 61))
    assert not items_naming(
        [i for i in conversation_items(api) if i["pk"]["S"] == f"SESSION#{parent}"], [forked]
    )


def test_a_parent_deleted_while_its_forks_copy_is_due_finishes_it_and_leaves_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    forked = fork(api, tenant, parent, 80)["id"]
    before = [m["content"] for m in transcript(api, tenant, forked)]

    assert api.call("DELETE", f"/v1/sessions/{parent}", token=tenant.token).status == 204

    left = [i for i in conversation_items(api) if i["pk"]["S"] == f"SESSION#{parent}"]
    assert [i["sk"]["S"] for i in left] == ["SESSION"]  # a tombstone
    assert [m["content"] for m in transcript(api, tenant, forked)] == before
    assert stored_turn_seqs(api, forked) == list(range(1, 80, 2))
    run_fork_copy_jobs(api)  # the copy job finds nothing left to do
    run_erasure_jobs(api, sweeps=True)
    assert [m["content"] for m in transcript(api, tenant, forked)] == before
    assert send(api, tenant, forked, "still there?")["turn"]["userSeq"] == 81


def test_a_copy_cut_short_resumes_and_a_duplicate_delivery_changes_nothing(
    api: InProcessApi, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dynamo_forks, "CHUNK_TURNS", 5)
    parent = session_with(api, tenant, 100)
    forked = fork(api, tenant, parent, 100)["id"]
    job = ForkCopyJob(workspace_id=tenant.workspace_id, parent_id=parent, fork_id=forked)
    steps = iter([60.0, 60.0, 1.0])  # time for two chunks, then not for a third

    outcome = api.container.forks.copy
    with pytest.raises(RuntimeError, match="resumes"):
        outcome(job, time_left=lambda: next(steps))
    assert stored_turn_seqs(api, forked)[0] == 100 - 2 * CEILING_TURNS - 2 * 2 * 5 + 1

    for delivery in (2, 3):  # the redelivery finishes; a duplicate finds it done
        assert invoke_worker(api, job_record(job.to_body(), delivery), "fork_copy")
    assert stored_turn_seqs(api, forked) == list(range(1, 100, 2))
    assert [m["seq"] for m in transcript(api, tenant, forked)] == list(range(1, 101))


def test_a_fork_deleted_while_its_copy_runs_keeps_nothing_once_swept(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    forked = fork(api, tenant, parent, 100)["id"]
    # The copy's first write is in flight when the delete lands.
    heal = deleted_before_the_next(api, tenant, "BatchWriteItem", forked)
    jobs = receive_jobs(api, "fork_copy")
    assert invoke_worker(api, jobs[0], "fork_copy")
    ack(api, jobs[0], "fork_copy")
    heal()
    assert stored_turn_seqs(api, forked)  # the write in flight landed after the deletion

    run_erasure_jobs(api, sweeps=True)
    assert stored_turn_seqs(api, forked) == []
    left = [i for i in conversation_items(api) if i["pk"]["S"] == f"SESSION#{forked}"]
    assert [i["sk"]["S"] for i in left] == ["SESSION"]  # its tombstone, till retention
    assert not [i for i in conversation_items(api) if i["sk"]["S"] == f"FORK#{forked}"]


# -- independent lives ------------------------------------------------------------------------


def test_an_erasure_takes_the_end_users_forks_and_forks_of_forks(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 60)
    child = fork(api, tenant, parent, 40)["id"]
    grandchild = fork(api, tenant, child, 30)["id"]
    listed = api.call(
        "GET", "/v1/sessions", token=tenant.token, query={"externalRef": "customer-4471"}
    ).body["sessions"]
    assert {s["id"]: s["forkOf"] for s in listed} == {
        grandchild: {"sessionId": child, "atSeq": 30},
        child: {"sessionId": parent, "atSeq": 40},
        parent: None,
    }

    erasure = api.call(
        "POST", "/v1/erasures", token=tenant.token, json_body={"externalRef": "customer-4471"}
    ).body
    run_erasure_jobs(api, sweeps=True)

    receipt = api.call("GET", f"/v1/erasures/{erasure['id']}", token=tenant.token).body
    assert (receipt["status"], receipt["sessionsErased"]) == ("done", 3)
    for session_id in (parent, child, grandchild):
        assert api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token).status == 404
    assert items_naming(conversation_items(api), [parent, child, grandchild]) == []
    # The copies still queued (the grandchild's was made through its parent) find them gone.
    assert len(run_fork_copy_jobs(api)) == 2
    assert items_naming(conversation_items(api), [parent, child, grandchild]) == []


def test_an_archived_parent_may_be_forked_and_its_purge_leaves_the_fork_whole(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    settings = api.container.settings
    now = datetime.now(UTC)
    api.container.retention.run(now + timedelta(days=settings.idle_archive_days + 1))
    archived = api.call("GET", f"/v1/sessions/{parent}", token=tenant.token).body
    assert archived["status"] == "archived"

    forked = fork(api, tenant, parent, 100)  # its copy is still due
    before = [m["content"] for m in transcript(api, tenant, forked["id"])]
    later = now + timedelta(days=settings.idle_archive_days + settings.purge_after_days + 2)
    report = api.container.retention.run(later)

    assert forked["status"] == "active"
    assert report.purged == 1
    assert api.call("GET", f"/v1/sessions/{parent}", token=tenant.token).status == 404
    assert [m["content"] for m in transcript(api, tenant, forked["id"])] == before
    assert stored_turn_seqs(api, forked["id"]) == list(range(1, 100, 2))


# -- creations that do not complete ----------------------------------------------------------


def test_a_fork_whose_parent_is_deleted_during_its_creation_is_not_found_and_leaves_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    keys_before = {i["pk"]["S"] for i in conversation_items(api)}
    heal = deleted_before_the_next(api, tenant, "TransactWriteItems", parent)
    body = fork(api, tenant, parent, 100, status=404)
    heal()

    assert body["error"]["code"] == "session_not_found"
    assert {i["pk"]["S"] for i in conversation_items(api)} == keys_before


def test_a_creation_cut_short_leaves_only_a_tombstone_the_retention_run_removes(
    api: InProcessApi, tenant: Tenant
) -> None:
    parent = session_with(api, tenant, 100)
    keys_before = {i["pk"]["S"] for i in conversation_items(api)}
    client = api.container.infrastructure.clients["dynamodb"]
    heals = [
        inject(client, op, lambda params: dynamodb_error("InternalServerError", 500))
        for op in ("TransactWriteItems", "DeleteItem")
    ]

    assert fork(api, tenant, parent, 100, status=503)["error"]["code"] == "unavailable"
    for heal in heals:
        heal()
    [placeholder] = {i["pk"]["S"] for i in conversation_items(api)} - keys_before
    grace = api.container.settings.deletion_grace_seconds
    api.container.retention.run(datetime.now(UTC) + timedelta(seconds=grace + 1))

    assert placeholder.startswith("SESSION#ses_")
    assert {i["pk"]["S"] for i in conversation_items(api)} == keys_before


def test_a_regenerated_answer_on_the_embedded_model_differs_from_its_parents(
    api: InProcessApi, tenant: Tenant
) -> None:
    # Given an answer on a plain session (the embedded model, deterministic)
    parent = open_session(api, tenant)
    first = send(api, tenant, parent, "Tell me a joke")["output"]
    again = send(api, tenant, parent, "Tell me a joke")["output"]

    # When it is regenerated twice: forks before it, the same input sent again
    regenerated = [
        send(api, tenant, fork(api, tenant, parent, 0)["id"], "Tell me a joke")["output"]
        for _ in range(2)
    ]

    # Then each fork's answer is its own; outside forks the answer stays as it was
    assert first == 'You said: "Tell me a joke". I remember 0 earlier messages.'
    assert again == 'You said: "Tell me a joke". I remember 2 earlier messages.'
    assert len({first, *regenerated}) == 3
    assert all('You said: "Tell me a joke".' in answer for answer in regenerated)


def test_forks_count_against_the_workspaces_turn_limit_and_a_refused_one_opens_nothing() -> None:
    limits = {"WORKSPACE_TURNS_PER_SECOND": "1", "WORKSPACE_TURN_BURST": "3"}
    with inprocess_stack(limits) as stack:
        tenant = Tenant(*new_workspace(stack, "metered"))
        parent = open_session(stack, tenant)
        seed_history(stack, parent, 4)
        answers = [
            stack.call(
                "POST", f"/v1/sessions/{parent}/forks", token=tenant.token, json_body={"atSeq": 4}
            )
            for _ in range(4)
        ]
        listed = stack.call(
            "GET", "/v1/sessions", token=tenant.token, query={"externalRef": "customer-4471"}
        ).body["sessions"]

    assert [a.status for a in answers] == [201, 201, 201, 429]
    refused = answers[-1]
    assert refused.body["error"]["code"] == "rate_limited"
    assert int({k.lower(): v for k, v in refused.headers.items()}["retry-after"]) >= 1
    assert len(listed) == 1 + 3  # the parent and the three forks served: nothing more
