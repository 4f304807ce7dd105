"""Recording: exactly once through every door, whatever fails (issue 3)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from functions.stream.app import StreamDoor
from tests.support.faults import dynamodb_error, inject, is_turn_put
from tests.support.inprocess_api import InProcessApi
from tests.support.repair_jobs import drain_repairs
from tests.support.sse import parse_sse
from tests.support.tenants import Tenant, open_session, predict, transcript


def stream_door(
    api: InProcessApi, tenant: Tenant, cap: str, body: dict[str, Any], **headers: str
) -> tuple[int, str]:
    door = StreamDoor(lambda: api.container)
    response = door.handle(
        "POST",
        f"/v1/capabilities/{cap}/predict/stream",
        {"Authorization": f"Bearer {tenant.token}", **headers},
        json.dumps(body).encode(),
    )
    return response.status, b"".join(response.chunks).decode()


def test_every_door_records_each_turn_exactly_once_in_the_same_shape(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    doors: list[Callable[[str], dict[str, Any]]] = [
        lambda text: predict(api, tenant, session_id, text).body,
        lambda text: (
            api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=tenant.token,
                json_body={"input": text},
            ).body
        ),
        lambda text: parse_sse(
            api.call(
                "POST",
                "/v1/capabilities/cap-generative/predict/stream",
                token=tenant.token,
                json_body={"input": text, "sessionId": session_id},
            ).body
        )[-1][1],
        lambda text: parse_sse(
            stream_door(api, tenant, "cap-generative", {"input": text, "sessionId": session_id})[1]
        )[-1][1],
    ]
    predictions = [door(f"door {i}") for i, door in enumerate(doors)]

    messages = transcript(api, tenant, session_id)
    assert [m["seq"] for m in messages] == list(range(1, 9))
    for i, prediction in enumerate(predictions):
        assert prediction["recorded"] is True
        user_seq, assistant_seq = prediction["turn"]["userSeq"], prediction["turn"]["assistantSeq"]
        assert assistant_seq == user_seq + 1 == 2 * i + 2
        user, answer = messages[user_seq - 1], messages[assistant_seq - 1]
        assert (user["role"], user["content"]) == ("user", f"door {i}")
        assert (answer["role"], answer["content"], answer["withheld"]) == (
            "assistant",
            prediction["output"],
            False,
        )
        assert (
            set(user)
            == set(answer)
            == {
                "seq",
                "role",
                "content",
                "createdAt",
                "withheld",
                "truncated",
                "abandoned",
                "attachments",
            }
        )


def test_stream_door_sends_deltas_then_done(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    status, raw = stream_door(
        api, tenant, "cap-generative", {"input": "tell me a story", "sessionId": session_id}
    )
    events = parse_sse(raw)
    assert status == 200
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"delta"} and len(kinds) > 2
    done = events[-1][1]
    assert "".join(data["text"] for kind, data in events[:-1]) == done["output"]


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        ({"input": "hi"}, {"Authorization": "Bearer nope-nope-nope-nope"}, 401, "unauthorized"),
        ({"input": 5}, {}, 422, "validation_error"),
        ({"input": "hi", "sessionId": "ses_missing"}, {}, 404, "session_not_found"),
    ],
)
def test_stream_door_refusals_match_predict(
    api: InProcessApi,
    tenant: Tenant,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    door = StreamDoor(lambda: api.container)
    all_headers = {"Authorization": f"Bearer {tenant.token}", **headers}
    response = door.handle(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        all_headers,
        json.dumps(body).encode(),
    )
    payload = json.loads(b"".join(response.chunks))
    assert (response.status, payload["error"]["code"]) == (status, code)
    if "Authorization" not in headers:
        same = (
            predict(api, tenant, body.get("sessionId"), body["input"])
            if isinstance(body["input"], str)
            else None
        )
        if same is not None:
            assert (same.status, same.body["error"]["code"]) == (status, code)


def test_idempotent_retry_returns_the_first_response_and_records_nothing(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    body = {"input": "pay once", "sessionId": session_id}
    first = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body=body,
        headers={"Idempotency-Key": "k-1"},
    )
    retry = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body=body,
        headers={"Idempotency-Key": "k-1"},
    )
    assert first.status == retry.status == 200
    assert retry.body == first.body
    assert len(transcript(api, tenant, session_id)) == 2

    other_body = api.call(
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body={**body, "input": "different"},
        headers={"Idempotency-Key": "k-1"},
    )
    assert other_body.status == 422 and other_body.body["error"]["code"] == "idempotency_key_reused"
    assert len(transcript(api, tenant, session_id)) == 2


def test_idempotency_keys_are_scoped_per_workspace(
    api: InProcessApi, tenant: Tenant, other_tenant: Tenant
) -> None:
    mine = open_session(api, tenant)
    theirs = open_session(api, other_tenant)
    a = api.call(
        "POST",
        f"/v1/sessions/{mine}/messages",
        token=tenant.token,
        json_body={"input": "same"},
        headers={"Idempotency-Key": "shared"},
    )
    b = api.call(
        "POST",
        f"/v1/sessions/{theirs}/messages",
        token=other_tenant.token,
        json_body={"input": "same"},
        headers={"Idempotency-Key": "shared"},
    )
    assert a.status == b.status == 200
    assert a.body["sessionId"] == mine and b.body["sessionId"] == theirs
    assert len(transcript(api, other_tenant, theirs)) == 2


def test_a_duplicate_while_the_first_still_runs_is_409(
    api: InProcessApi, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = open_session(api, tenant)
    started, release = threading.Event(), threading.Event()
    real_serve = api.container.turns.serve

    def slow_serve(*args: Any, **kwargs: Any) -> Any:
        started.set()
        release.wait(10)
        return real_serve(*args, **kwargs)

    monkeypatch.setattr(api.container.turns, "serve", slow_serve)
    body = {"input": "slow", "sessionId": session_id}
    call = lambda: api.call(  # noqa: E731
        "POST",
        "/v1/capabilities/cap-generative/predict",
        token=tenant.token,
        json_body=body,
        headers={"Idempotency-Key": "k-slow"},
    )
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(call)
        assert started.wait(10)
        duplicate = call()
        release.set()
        assert first.result(10).status == 200
    assert duplicate.status == 409 and duplicate.body["error"]["code"] == "idempotency_in_progress"
    assert len(transcript(api, tenant, session_id)) == 2


def test_racing_turns_on_one_session_stay_contiguous(api: InProcessApi, tenant: Tenant) -> None:
    session_id = open_session(api, tenant)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: predict(api, tenant, session_id, f"race {i}"), range(16)))
    assert all(r.status == 200 and r.body["recorded"] for r in results)
    messages = transcript(api, tenant, session_id)
    assert [m["seq"] for m in messages] == list(range(1, 33))
    by_seq = {m["seq"]: m for m in messages}
    for r in results:
        user, answer = by_seq[r.body["turn"]["userSeq"]], by_seq[r.body["turn"]["assistantSeq"]]
        assert user["role"] == "user" and answer["role"] == "assistant"
        assert answer["content"] == r.body["output"] and user["content"] in r.body["output"]
    assert sorted(m["content"] for m in messages if m["role"] == "user") == sorted(
        f"race {i}" for i in range(16)
    )


BLOCKING_FILTER = {
    "type": "embedded",
    "blockedTerms": ["moonshot"],
    "withheldMessage": "Sorry, I can't help with that.",
}


def test_a_withheld_answer_is_stored_as_withheld_and_never_leaks(
    api: InProcessApi, tenant: Tenant
) -> None:
    cap = api.call(
        "POST",
        "/v1/capabilities",
        token=tenant.token,
        json_body={"name": "filtered", "kind": "generative", "contentFilter": BLOCKING_FILTER},
    ).body["id"]
    session_id = open_session(api, tenant, capability=cap)
    plain = predict(api, tenant, session_id, "tell me about the moonshot plan", cap=cap).body
    status, raw = stream_door(
        api, tenant, cap, {"input": "the moonshot again", "sessionId": session_id}
    )
    events = parse_sse(raw)

    assert plain["withheld"] is True and plain["output"] == "Sorry, I can't help with that."
    assert status == 200 and events[-1][1]["withheld"] is True
    assert [data["text"] for kind, data in events if kind == "delta"] == [
        "Sorry, I can't help with that."
    ]
    messages = transcript(api, tenant, session_id)
    answers = [m for m in messages if m["role"] == "assistant"]
    assert all(m["withheld"] and m["content"] == "Sorry, I can't help with that." for m in answers)
    assert not any("You said" in m["content"] for m in messages)  # the flagged answer text
    context = api.call("GET", f"/v1/sessions/{session_id}/context", token=tenant.token).body
    assert not any("You said" in m["content"] for m in context["messages"])


def _fail_transcript_writes(client: Any, how: str, times: int = 100) -> dict[str, int]:
    """Make the turn's PutItem fail before it reaches the table (botocore's before-call
    hook short-circuits the request): throttling, a 5xx, or a read timeout."""
    state = {"left": times, "seen": 0}

    def fault(params: dict[str, Any]) -> Any:
        if state["left"] <= 0 or not is_turn_put(params):
            return None
        state["left"] -= 1
        state["seen"] += 1
        if how == "timeout":
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        if how == "throttling":
            return dynamodb_error("ThrottlingException", 400)
        return dynamodb_error("InternalServerError", 500)

    inject(client, "PutItem", fault)
    return state


@pytest.mark.parametrize("fault", ["throttling", "server_error", "timeout"])
def test_a_failed_transcript_write_still_answers_and_is_repaired_once_in_order(
    api: InProcessApi, tenant: Tenant, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = open_session(api, tenant)
    predict(api, tenant, session_id, "before the fault")
    state = _fail_transcript_writes(api.container.infrastructure.clients["dynamodb"], fault)

    response = predict(api, tenant, session_id, "during the fault")

    assert response.status == 200
    assert response.body["recorded"] is False and response.body["turn"] is None
    assert "during the fault" in response.body["output"]
    assert state["seen"] >= 1
    assert "TranscriptWriteFailed" in capsys.readouterr().out  # the EMF metric was emitted
    assert len(transcript(api, tenant, session_id)) == 2

    state["left"] = 0
    records = drain_repairs(api)
    assert len(records) == 1
    event = {"Records": records}
    assert api.invoke("RepairFunction", event) == {"batchItemFailures": []}
    assert api.invoke("RepairFunction", event) == {"batchItemFailures": []}  # a duplicate delivery

    messages = transcript(api, tenant, session_id)
    assert [m["seq"] for m in messages] == [1, 2, 3, 4]
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "before the fault",
        "during the fault",
    ]
    assert messages[3]["content"] == response.body["output"]


def test_a_write_that_landed_before_its_timeout_is_not_recorded_twice(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    client = api.container.infrastructure.clients["dynamodb"]
    fired = {"n": 0}

    def before_call(params: dict[str, Any], **_: Any) -> None:
        fired["turn"] = is_turn_put(params)

    def after_call(**_: Any) -> None:
        if fired.pop("turn", False) and fired["n"] == 0:
            fired["n"] += 1
            raise ReadTimeoutError(endpoint_url="http://dynamodb")

    client.meta.events.register("before-call.dynamodb.PutItem", before_call)
    client.meta.events.register("after-call.dynamodb.PutItem", after_call)
    response = predict(api, tenant, session_id, "did it land?")
    client.meta.events.unregister("after-call.dynamodb.PutItem", after_call)
    client.meta.events.unregister("before-call.dynamodb.PutItem", before_call)

    # The turn's own retry finds where its write landed: recorded, nothing to repair.
    assert response.status == 200 and response.body["recorded"] is True
    assert response.body["turn"] == {"userSeq": 1, "assistantSeq": 2}
    assert drain_repairs(api) == []
    assert [m["seq"] for m in transcript(api, tenant, session_id)] == [1, 2]


def test_a_repair_that_cannot_be_written_stays_on_the_queue(
    api: InProcessApi, tenant: Tenant
) -> None:
    session_id = open_session(api, tenant)
    state = _fail_transcript_writes(
        api.container.infrastructure.clients["dynamodb"], "server_error"
    )
    predict(api, tenant, session_id, "first try fails")
    records = drain_repairs(api)
    failures = api.invoke("RepairFunction", {"Records": records})
    assert failures == {"batchItemFailures": [{"itemIdentifier": records[0]["messageId"]}]}
    state["left"] = 0
    assert api.invoke("RepairFunction", {"Records": records}) == {"batchItemFailures": []}
    assert len(transcript(api, tenant, session_id)) == 2
