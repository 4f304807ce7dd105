"""A paid answer is never lost (issue 7): whatever stops the transcript write, the client
gets the answer (200, ``recorded: false``) and the repair queue lands the turn once; an
answer too long to store is stored cut (``truncated: true``) while the client gets all
of it; a turn the store can never take is counted, not cycled into the DLQ."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.adapters import FakeProvider
from tests.support.faults import dynamodb_error, inject, is_turn_put
from tests.support.inprocess_api import InProcessApi
from tests.support.repair_jobs import drain_repairs
from tests.support.tenants import Tenant, open_session, predict, transcript


@pytest.fixture
def answers(api: InProcessApi) -> Iterator[FakeProvider]:
    """The model every capability answers with, for this test."""
    provider = FakeProvider("short")
    answerer = api.container.turns._answerer
    original = answerer._provider_for
    answerer._provider_for = lambda capability: provider
    yield provider
    answerer._provider_for = original


def refuse_turn_puts(client: Any, times: int) -> dict[str, int]:
    """The turn's PutItem answered with DynamoDB's ValidationException (not a capacity
    error): what an item the table cannot take gets."""
    state = {"left": times, "seen": 0}

    def fault(params: dict[str, Any]) -> Any:
        if state["left"] <= 0 or not is_turn_put(params):
            return None
        state["left"] -= 1
        state["seen"] += 1
        return dynamodb_error("ValidationException", 400)

    inject(client, "PutItem", fault)
    return state


def repair_all(api: InProcessApi) -> dict[str, Any]:
    records = drain_repairs(api)
    assert records, "nothing was queued for repair"
    result: dict[str, Any] = api.invoke("RepairFunction", {"Records": records})
    return result


@pytest.mark.parametrize(
    ("unit", "question", "stored_chars"),
    [
        ("x", "tell me everything", 100_000),  # MaxStoredAnswerChars
        ("é", "tell me everything", 100_000),
        # 4 bytes a character after a 30,000-byte input: the item's 400 KB cut first,
        # (400,000 - 2,048 of keys and attributes - 30,000) // 4 characters.
        ("😀", "q" * 30_000, 91_988),
    ],
)
def test_an_answer_too_long_to_store_is_stored_cut_and_served_whole(
    api: InProcessApi,
    tenant: Tenant,
    answers: FakeProvider,
    unit: str,
    question: str,
    stored_chars: int,
) -> None:
    session_id = open_session(api, tenant)
    answers.text = unit * 450_000

    response = predict(api, tenant, session_id, question)

    assert response.status == 200
    assert response.body["recorded"] is True
    assert response.body["output"] == unit * 450_000
    stored = transcript(api, tenant, session_id)[-1]
    assert stored["truncated"] is True and stored["role"] == "assistant"
    assert stored["content"] == unit * stored_chars
    assert transcript(api, tenant, session_id)[0]["truncated"] is False


def test_a_write_the_store_refuses_is_answered_and_repaired_once(
    api: InProcessApi, tenant: Tenant, answers: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(api, tenant)
    state = refuse_turn_puts(api.container.infrastructure.clients["dynamodb"], times=1)

    response = predict(api, tenant, session_id, "is this kept?")

    assert response.status == 200
    assert (response.body["recorded"], response.body["turn"]) == (False, None)
    assert response.body["output"] == "short"
    assert state["seen"] == 1
    assert "TranscriptWriteFailed" in capsys.readouterr().out
    assert transcript(api, tenant, session_id) == []

    assert repair_all(api) == {"batchItemFailures": []}

    messages = transcript(api, tenant, session_id)
    assert [(m["seq"], m["content"]) for m in messages] == [(1, "is this kept?"), (2, "short")]


def test_a_turn_that_can_never_be_stored_is_counted_not_cycled_into_the_dlq(
    api: InProcessApi, tenant: Tenant, answers: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(api, tenant)
    refuse_turn_puts(api.container.infrastructure.clients["dynamodb"], times=100)
    assert predict(api, tenant, session_id, "never stored").body["recorded"] is False

    # The repair consumer takes the record off the queue (no batch item failure) and
    # counts the loss, instead of failing it five times into the DLQ.
    assert repair_all(api) == {"batchItemFailures": []}

    assert "TranscriptRepairFailed" in capsys.readouterr().out
    assert transcript(api, tenant, session_id) == []


def test_an_answer_with_a_lone_surrogate_is_stored_and_served_as_valid_text(
    api: InProcessApi, tenant: Tenant, answers: FakeProvider
) -> None:
    session_id = open_session(api, tenant)
    answers.text = "half a pair: \ud83d, and more"

    response = predict(api, tenant, session_id, "say something odd")

    assert response.status == 200 and response.body["recorded"] is True
    assert response.body["output"] == "half a pair: \ufffd, and more"
    assert transcript(api, tenant, session_id)[-1]["content"] == "half a pair: \ufffd, and more"
    json.dumps(response.body).encode("utf-8")  # the whole body is encodable
