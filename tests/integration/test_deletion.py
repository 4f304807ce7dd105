"""Deleting a conversation always finishes: the session is marked deleted first (404 at
once, its head stripped to a tombstone of keys, status and times), its items are
removed, the head goes last; an interruption at any step is finished by a retry of the
DELETE or by the retention run, and a write that was in flight when the delete landed is
removed by the delete's delayed sweep."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convo_memory.adapters.dynamo import items
from convo_memory.bootstrap import Adapters, Infrastructure
from convo_memory.domain.generation import Completion
from convo_memory.domain.prompt import Prompt
from tests.support.erasure_jobs import receive_jobs, release_delayed, run_erasure_jobs
from tests.support.faults import dynamodb_error, inject
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace, seed_history
from tests.support.table_scan import every_item, items_naming
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
    out = api.container.infrastructure.clients["dynamodb"].query(
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
    heal = fail_nth(api.container.infrastructure.clients["dynamodb"], "UpdateItem", 1)

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
    heal = fail_nth(api.container.infrastructure.clients["dynamodb"], "BatchWriteItem", 2)

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
    heal = fail_nth(api.container.infrastructure.clients["dynamodb"], "DeleteItem", 1)

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


class HeldProvider:
    """A model that answers only once the test lets it: a turn held in flight."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def complete(self, prompt: Prompt) -> Completion:
        self.entered.set()
        assert self.release.wait(10), "the test never released the turn"
        return Completion(text=f"about {prompt.user_input}")

    def stream(self, prompt: Prompt) -> Iterator[str]:
        yield self.complete(prompt).text


def head_of(api: InProcessApi, session_id: str) -> dict[str, Any]:
    head = api.container.infrastructure.clients["dynamodb"].get_item(
        TableName=api.container.settings.table_name, Key=items.head_key(session_id)
    )["Item"]
    return dict(head)


def test_a_turn_in_flight_when_the_delete_lands_leaves_nothing_but_the_bare_tombstone() -> None:
    held = HeldProvider()

    def hold_turns(adapters: Adapters, infrastructure: Infrastructure) -> Adapters:
        return dataclasses.replace(adapters, provider_for=lambda capability: held)

    with inprocess_stack(adapt=hold_turns) as api:
        tenant = Tenant(*new_workspace(api, "alpha"))
        principal = {"tenant_id": "store-a", "user_id": "u_913"}
        session_id = open_session(
            api, tenant, principal=principal, metadata={"plan": "plan-zq9"}, externalRef="cust-77"
        )
        held.release.set()
        assert predict(api, tenant, session_id, "my card ends in 4242-zq").status == 200
        held.release.clear()
        held.entered.clear()
        answers: list[Any] = []
        turn = threading.Thread(
            target=lambda: answers.append(predict(api, tenant, session_id, "and order zq-555?"))
        )
        turn.start()
        assert held.entered.wait(10)  # the turn read the session and is at the model

        assert delete(api, tenant, session_id) == 204

        # From the 204 on: the head is a tombstone of keys, status and times.
        assert set(head_of(api, session_id)) <= items.TOMBSTONE_ATTRIBUTES
        assert stored_keys(api, session_id) == ["SESSION"]
        held.release.set()
        turn.join(10)
        # The turn in flight was answered, and its write landed where no route reads it.
        assert answers[0].status == 200, answers[0].body
        assert len(stored_keys(api, session_id)) == 2
        assert (
            api.call("GET", f"/v1/sessions/{session_id}/messages", token=tenant.token).status == 404
        )

        # The deletion queued its sweep for when no write in flight can land any more.
        grace = api.container.settings.deletion_grace_seconds
        assert receive_jobs(api) == []  # delayed
        assert release_delayed(api) == 1
        (swept,) = run_erasure_jobs(api)

        assert swept == {
            "kind": "sweep",
            "workspaceId": tenant.workspace_id,
            "sessionIds": [session_id],
            "erasureId": None,
            "eraseTraces": False,
            "recheck": False,
        }
        assert min(900, grace) >= 360  # longer than any function that could still write
        assert stored_keys(api, session_id) == ["SESSION"]
        assert set(head_of(api, session_id)) <= items.TOMBSTONE_ATTRIBUTES
        conversations = every_item(api)["ConversationsTable"]
        assert items_naming(conversations, [session_id]) == [head_of(api, session_id)]
        assert (
            items_naming(conversations, ["cust-77", "u_913", "4242-zq", "zq-555", "plan-zq9"]) == []
        )
