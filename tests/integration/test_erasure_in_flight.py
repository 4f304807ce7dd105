"""An erasure's ``done`` covers the turns that were in flight when it was accepted: an
agent turn whose webhook tool takes seconds has read its session when the erasure is
requested (traces erased); the job waits that turn out, so when the receipt says ``done``
a scan of every table finds nothing of it: no message row, no digest row, no run trace.
Over moto, through the real routes, the real worker and a tool server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.webhook_server import Reply, WebhookServer
from tests.support.agent_api import create_agent, open_session, webhook_tool
from tests.support.erasure_jobs import run_erasure_jobs
from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace
from tests.support.table_scan import every_item, items_naming
from tests.support.waiting import wait_for

TOOL_SECONDS = 3.0


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@pytest.fixture
def api(hook: WebhookServer) -> Iterator[InProcessApi]:
    with inprocess_stack({"TOOL_ALLOWED_HOSTS": hook.host}) as stack:
        yield stack


def test_an_erasure_accepted_during_a_slow_agent_turn_is_done_only_without_it(
    api: InProcessApi, hook: WebhookServer
) -> None:
    _, token = new_workspace(api, "alpha")
    agent, secret, _ = create_agent(api, token, webhook_tool("order", hook.url("/order")))
    hook.secret = secret or ""
    hook.answers["/order"] = Reply(200, {"output": "order 12345 shipped"}, delay=TOOL_SECONDS)
    session_id = open_session(api, token, agent)
    answers: list[Any] = []
    turn = threading.Thread(
        target=lambda: answers.append(
            api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": "where is my order 12345?"},
            )
        )
    )
    turn.start()
    try:
        wait_for(lambda: hook.calls_to("/order"), 5, "the turn's tool call")
        requested = api.call(
            "POST",
            "/v1/erasures",
            token=token,
            json_body={"externalRef": "customer-4471", "traces": "erase"},
        )
        assert requested.status == 202, requested.body
        assert answers == []  # the turn is still in flight

        run_erasure_jobs(api)  # the job, not its delayed sweeps
    finally:
        turn.join(30)

    receipt = api.call("GET", f"/v1/erasures/{requested.body['id']}", token=token).body
    assert receipt["status"] == "done" and receipt["sessionsErased"] == 1
    # The turn ended before the job did: it read the session before the claim, answered,
    # and its writes landed; the erasure removed them before it said done.
    (answer,) = answers
    assert answer.status == 200 and answer.body["runId"], answer.body
    assert receipt["tracesErased"] == 1
    tables = every_item(api)
    assert items_naming(tables["ConversationsTable"], [session_id]) == []
    assert items_naming(tables["RunsTable"], [answer.body["runId"]]) == []
    assert items_naming(tables["ConversationsTable"], ["order 12345"]) == []
