"""Per-workspace turn limits (WorkspaceTurnsPerSecond): every turn door counts a turn in
one DynamoDB counter per workspace and second; over the limit the door answers
``429 rate_limited`` with ``Retry-After`` before anything runs or is stored, and other
workspaces are not affected. The clock is injected, so a second never ends mid-test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.adapters.dynamo.turn_limiter import COUNTER_TTL_SECONDS, counter_key
from convo_memory.ports import NoTurnLimit
from convo_memory.stream_door import StreamDoor
from tests.fakes.adapters import FakeClock, FakeMetrics
from tests.support.faults import dynamodb_error, inject
from tests.support.inprocess_api import (
    ApiResponse,
    AwsBackend,
    InProcessApi,
    new_workspace,
    serving,
)
from tests.support.tenants import Tenant

LIMIT = 3


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def limited(backend: AwsBackend, clock: FakeClock, metrics: FakeMetrics) -> Iterator[InProcessApi]:
    env = {"WORKSPACE_TURNS_PER_SECOND": str(LIMIT)}
    with serving(backend, env, clock=clock, metrics=metrics) as api:
        yield api


def _tenant(api: InProcessApi, name: str) -> Tenant:
    return Tenant(*new_workspace(api, name))


def _session(api: InProcessApi, tenant: Tenant) -> str:
    body = {"capabilityId": "cap-generative", "externalRef": "customer-1"}
    response = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def _turn(api: InProcessApi, tenant: Tenant, door: str, session_id: str) -> ApiResponse:
    if door == "messages":
        path, body = f"/v1/sessions/{session_id}/messages", {"input": "hello"}
    else:
        suffix = "/stream" if door == "buffered stream" else ""
        path = f"/v1/capabilities/cap-generative/predict{suffix}"
        body = {"input": "hello", "sessionId": session_id}
    return api.call("POST", path, token=tenant.token, json_body=body)


def _message_count(api: InProcessApi, tenant: Tenant, session_id: str) -> int:
    response = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
    return int(response.body["messageCount"])


def _assert_rate_limited(response: ApiResponse) -> None:
    assert response.status == 429, response.body
    assert set(response.body) == {"error"}
    assert response.body["error"]["code"] == "rate_limited"
    assert response.body["error"]["message"]
    assert {k.lower(): v for k, v in response.headers.items()}["retry-after"] == "1"


def test_a_tenant_over_its_limit_gets_429_and_another_tenant_is_not_affected(
    limited: InProcessApi, clock: FakeClock, metrics: FakeMetrics
) -> None:
    noisy, quiet = _tenant(limited, "noisy"), _tenant(limited, "quiet")
    noisy_session, quiet_session = _session(limited, noisy), _session(limited, quiet)

    # The limit counts turns on every door of the HttpApi together.
    for door in ("predict", "messages", "buffered stream"):
        assert _turn(limited, noisy, door, noisy_session).status == 200
    stored = _message_count(limited, noisy, noisy_session)
    refused = [_turn(limited, noisy, door, noisy_session) for door in ("predict", "messages")]
    quiet_turns = [_turn(limited, quiet, "predict", quiet_session) for _ in range(LIMIT)]

    for response in refused:
        _assert_rate_limited(response)
    assert _message_count(limited, noisy, noisy_session) == stored  # nothing stored
    assert [response.status for response in quiet_turns] == [200] * LIMIT
    assert metrics.counts["TurnsRateLimited"] == 2

    # The next second admits the noisy tenant again.
    clock.advance(1)
    assert _turn(limited, noisy, "predict", noisy_session).status == 200


def test_the_streaming_door_shares_the_workspaces_limit(limited: InProcessApi) -> None:
    tenant = _tenant(limited, "streamer")
    session_id = _session(limited, tenant)
    for _ in range(LIMIT):
        assert _turn(limited, tenant, "predict", session_id).status == 200
    door = StreamDoor(lambda: limited.container)
    body = json.dumps({"input": "one more", "sessionId": session_id}).encode()

    response = door.handle(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        {"authorization": f"Bearer {tenant.token}"},
        body,
    )

    assert response.status == 429
    assert ("Retry-After", "1") in response.headers
    assert json.loads(b"".join(response.chunks))["error"]["code"] == "rate_limited"


def test_each_counter_is_one_item_of_its_own_table_that_expires_by_ttl(
    limited: InProcessApi, clock: FakeClock
) -> None:
    tenant = _tenant(limited, "counted")
    session_id = _session(limited, tenant)
    for _ in range(2):
        _turn(limited, tenant, "predict", session_id)
    client = limited.container.clients["dynamodb"]
    settings = limited.container.settings

    second = int(clock())
    item = client.get_item(
        TableName=settings.turn_limits_table_name,
        Key=counter_key(tenant.workspace_id, second),
        ConsistentRead=True,
    )["Item"]
    ttl = client.describe_time_to_live(TableName=settings.turn_limits_table_name)

    assert item["turns"] == {"N": "2"}
    assert item["expiresAt"] == {"N": str(second + COUNTER_TTL_SECONDS)}
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expiresAt"
    # The conversations table never holds a counter.
    conversations = client.scan(TableName=settings.table_name)["Items"]
    assert not [
        i for i in conversations if tenant.workspace_id in i["pk"]["S"] and "TURNS" in i["sk"]["S"]
    ]


def test_an_unavailable_counter_admits_the_turn_and_is_counted(
    limited: InProcessApi, metrics: FakeMetrics
) -> None:

    tenant = _tenant(limited, "unlucky")
    session_id = _session(limited, tenant)
    client = limited.container.clients["dynamodb"]

    counters = limited.container.settings.turn_limits_table_name

    def throttled(params: dict[str, Any]) -> Any:
        if counters not in str(params.get("body", b"")):
            return None
        return dynamodb_error("ProvisionedThroughputExceededException", 400)

    heal = inject(client, "UpdateItem", throttled)
    try:
        responses = [_turn(limited, tenant, "predict", session_id) for _ in range(LIMIT + 1)]
    finally:
        heal()

    assert [response.status for response in responses] == [200] * (LIMIT + 1)
    assert metrics.counts["TurnLimiterUnavailable"] == LIMIT + 1


def test_zero_turns_the_limit_off(backend: AwsBackend) -> None:
    with serving(backend, {"WORKSPACE_TURNS_PER_SECOND": "0"}) as api:
        tenant = Tenant(*new_workspace(api, "unlimited"))
        session_id = _session(api, tenant)

        statuses = [_turn(api, tenant, "predict", session_id).status for _ in range(12)]

        assert isinstance(api.container.turn_limiter, NoTurnLimit)
        assert statuses == [200] * 12
