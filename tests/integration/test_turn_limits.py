"""Per-workspace turn limits (WorkspaceTurnsPerSecond, WorkspaceTurnBurst): a rate with
room for bursts, counted by every turn door in one DynamoDB item per workspace; over it
the door answers ``429 rate_limited`` with ``Retry-After`` before anything runs or is
stored, and other workspaces are not affected. The clock is injected: "at once" is one
instant, "20 a second" is 50 ms steps, and nothing sleeps."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from convo_memory.adapters.dynamo.rate_limit import COUNTER_TTL_SECONDS, MICROS, counter_key
from convo_memory.adapters.dynamo.slow_turns import SlowTurnLimiter
from convo_memory.doors.stream import StreamDoor
from convo_memory.ports import NoTurnLimit
from local_runtime.aws_resources import DEFAULT_TEMPLATE, load_template, parameter_defaults
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

DEFAULTS = parameter_defaults(load_template(DEFAULT_TEMPLATE))
RATE = int(DEFAULTS["WorkspaceTurnsPerSecond"])
BURST = int(DEFAULTS["WorkspaceTurnBurst"])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def limited(backend: AwsBackend, clock: FakeClock, metrics: FakeMetrics) -> Iterator[InProcessApi]:
    """The stack under the template's default limit (the in-process stack's own is high)."""
    env = {"WORKSPACE_TURNS_PER_SECOND": str(RATE), "WORKSPACE_TURN_BURST": str(BURST)}
    with serving(backend, env, clock=clock, metrics=metrics) as api:
        yield api


def _tenant(api: InProcessApi, name: str) -> Tenant:
    return Tenant(*new_workspace(api, name))


def _session(api: InProcessApi, tenant: Tenant) -> str:
    body = {"capabilityId": "cap-generative", "externalRef": "customer-1"}
    response = api.call("POST", "/v1/sessions", token=tenant.token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def _turn(api: InProcessApi, tenant: Tenant, door: str, session_id: str | None) -> ApiResponse:
    if door == "messages":
        path, body = f"/v1/sessions/{session_id}/messages", {"input": "hello"}
    else:
        suffix = "/stream" if door == "buffered stream" else ""
        path = f"/v1/capabilities/cap-generative/predict{suffix}"
        body = {"input": "hello", **({"sessionId": session_id} if session_id else {})}
    return api.call("POST", path, token=tenant.token, json_body=body)


def _message_count(api: InProcessApi, tenant: Tenant, session_id: str) -> int:
    response = api.call("GET", f"/v1/sessions/{session_id}", token=tenant.token)
    return int(response.body["messageCount"])


def _retry_after(response: ApiResponse) -> int:
    return int({k.lower(): v for k, v in response.headers.items()}["retry-after"])


def _assert_rate_limited(response: ApiResponse) -> None:
    assert response.status == 429, response.body
    assert set(response.body) == {"error"}
    assert response.body["error"]["code"] == "rate_limited"
    assert response.body["error"]["message"]
    assert _retry_after(response) >= 1


def test_the_template_defaults_allow_the_contracts_bursts() -> None:
    # 16 at once, and 20 a second for 3 seconds, fit; a sustained flood does not.
    assert BURST >= 16
    assert BURST + RATE * 2 >= 60  # 20 at each of t = 0, 1 and 2 s
    assert RATE < 20


def test_sixteen_turns_started_at_the_same_moment_are_all_served(
    limited: InProcessApi, metrics: FakeMetrics
) -> None:
    tenant = _tenant(limited, "sixteen users")

    with ThreadPoolExecutor(max_workers=16) as pool:
        responses = list(pool.map(lambda _: _turn(limited, tenant, "predict", None), range(16)))

    assert [r.status for r in responses] == [200] * 16
    assert metrics.counts["TurnsRateLimited"] == 0


@pytest.mark.parametrize("pattern", ["evenly", "twenty at each second"])
def test_twenty_turns_a_second_for_three_seconds_are_all_served(
    limited: InProcessApi, clock: FakeClock, metrics: FakeMetrics, pattern: str
) -> None:
    tenant = _tenant(limited, "busy hour")
    statuses = []
    for index in range(60):
        if pattern == "evenly" and index:
            clock.advance(0.05)
        elif pattern != "evenly" and index and index % 20 == 0:
            clock.advance(1.0)
        statuses.append(_turn(limited, tenant, "predict", None).status)

    assert statuses == [200] * 60
    assert metrics.counts["TurnsRateLimited"] == 0


def test_a_four_second_flood_is_refused_with_retry_after_and_others_are_served(
    limited: InProcessApi, clock: FakeClock, metrics: FakeMetrics
) -> None:
    noisy, quiet = _tenant(limited, "noisy"), _tenant(limited, "quiet")
    noisy_session, quiet_session = _session(limited, noisy), _session(limited, quiet)
    stored = _message_count(limited, noisy, noisy_session)
    served = refused = 0
    quiet_statuses = []
    last_refusal: ApiResponse | None = None
    for step in range(200):  # 50 turns a second for 4 seconds
        if step:
            clock.advance(0.02)
        response = _turn(limited, noisy, "predict", noisy_session)
        if response.status == 200:
            served += 1
        else:
            _assert_rate_limited(response)
            refused += 1
            last_refusal = response
        if step % 50 == 25:
            quiet_statuses.append(_turn(limited, quiet, "predict", quiet_session).status)

    # The burst, then the rate: nothing more (one turn of slack for rounding).
    assert BURST + RATE * 3 <= served <= BURST + RATE * 4 + 1
    assert refused == 200 - served and metrics.counts["TurnsRateLimited"] == refused
    assert _message_count(limited, noisy, noisy_session) == stored + 2 * served
    assert quiet_statuses == [200] * 4
    # Retry-After is honest: after it, the workspace is served again.
    assert last_refusal is not None
    clock.advance(_retry_after(last_refusal))
    assert _turn(limited, noisy, "predict", noisy_session).status == 200


def test_every_turn_door_shares_the_workspaces_limit(
    limited: InProcessApi, metrics: FakeMetrics
) -> None:
    tenant = _tenant(limited, "every door")
    session_id = _session(limited, tenant)
    doors = ["predict", "messages", "buffered stream"]
    for index in range(BURST):
        assert _turn(limited, tenant, doors[index % 3], session_id).status == 200
    stored = _message_count(limited, tenant, session_id)

    refused = [_turn(limited, tenant, door, session_id) for door in ("predict", "messages")]
    stream = StreamDoor(lambda: limited.container).handle(
        "POST",
        "/v1/capabilities/cap-generative/predict/stream",
        {"authorization": f"Bearer {tenant.token}"},
        json.dumps({"input": "one more", "sessionId": session_id}).encode(),
    )

    for response in refused:
        _assert_rate_limited(response)
    assert _message_count(limited, tenant, session_id) == stored  # nothing stored
    assert stream.status == 429
    headers = dict(stream.headers)
    assert int(headers["Retry-After"]) >= 1
    assert json.loads(b"".join(stream.chunks))["error"]["code"] == "rate_limited"
    assert metrics.counts["TurnsRateLimited"] == 3


def test_each_workspace_is_one_item_of_its_own_table_that_expires_by_ttl(
    limited: InProcessApi, clock: FakeClock
) -> None:
    tenant = _tenant(limited, "counted")
    session_id = _session(limited, tenant)
    for _ in range(2):
        _turn(limited, tenant, "predict", session_id)
    client = limited.container.infrastructure.clients["dynamodb"]
    settings = limited.container.settings

    items = client.scan(TableName=settings.turn_limits_table_name)["Items"]
    item = client.get_item(
        TableName=settings.turn_limits_table_name,
        Key=counter_key(tenant.workspace_id),
        ConsistentRead=True,
    )["Item"]
    ttl = client.describe_time_to_live(TableName=settings.turn_limits_table_name)

    # One item per workspace (the module's other tests share the table): this one's is
    # the only item naming it, and no item names two workspaces.
    ids = [i["id"]["S"] for i in items]
    assert ids.count(tenant.workspace_id) == 1 and len(ids) == len(set(ids))
    now_us = round(clock() * MICROS)
    assert int(item["tat"]["N"]) == now_us + 2 * (MICROS // RATE)  # two turns' backlog
    assert int(item["expiresAt"]["N"]) >= int(item["tat"]["N"]) // MICROS + COUNTER_TTL_SECONDS
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expiresAt"
    # The conversations table never holds a counter.
    conversations = client.scan(TableName=settings.table_name)["Items"]
    assert not [
        i for i in conversations if tenant.workspace_id in i["pk"]["S"] and "TURNS" in i["sk"]["S"]
    ]


def _failing_counters(api: InProcessApi, code: str, status: int) -> Callable[[], None]:
    """Every write of the turn limits table answers DynamoDB's error ``code``."""
    client = api.container.infrastructure.clients["dynamodb"]
    counters = api.container.settings.turn_limits_table_name

    def failing(params: dict[str, Any]) -> Any:
        if counters not in str(params.get("body", b"")):
            return None
        return dynamodb_error(code, status)

    return inject(client, "UpdateItem", failing)


def test_an_unavailable_counter_admits_the_turn_and_is_counted(
    backend: AwsBackend, clock: FakeClock, metrics: FakeMetrics
) -> None:
    # The slow-turn cap off: it writes to the same table, once a turn has run a second of
    # real time, and a loaded machine's turn would count its own unavailable write too.
    env = {
        "WORKSPACE_TURNS_PER_SECOND": str(RATE),
        "WORKSPACE_TURN_BURST": str(BURST),
        "WORKSPACE_MAX_SLOW_TURNS": "0",
    }
    with serving(backend, env, clock=clock, metrics=metrics) as limited:
        tenant = _tenant(limited, "unlucky")
        session_id = _session(limited, tenant)

        heal = _failing_counters(limited, "InternalServerError", 500)
        try:
            responses = [_turn(limited, tenant, "predict", session_id) for _ in range(BURST + 1)]
        finally:
            heal()

        assert [response.status for response in responses] == [200] * (BURST + 1)
        assert metrics.counts["TurnLimiterUnavailable"] == BURST + 1


def test_a_throttled_counter_is_a_flood_and_refuses_the_turn(
    limited: InProcessApi, metrics: FakeMetrics
) -> None:
    # DynamoDB throttles an item that takes more writes than it can: only a flood does
    # that to a limiter's shard, so the turn is refused, not let through.
    tenant = _tenant(limited, "flooding")
    session_id = _session(limited, tenant)
    stored = _message_count(limited, tenant, session_id)

    heal = _failing_counters(limited, "ProvisionedThroughputExceededException", 400)
    try:
        refused = _turn(limited, tenant, "predict", session_id)
    finally:
        heal()

    _assert_rate_limited(refused)
    assert _retry_after(refused) == 1
    assert metrics.counts["TurnLimiterThrottled"] == 1
    assert metrics.counts["TurnLimiterUnavailable"] == 0
    assert _message_count(limited, tenant, session_id) == stored  # nothing ran
    assert _turn(limited, tenant, "predict", session_id).status == 200  # healed


def test_zero_turns_the_limit_off(backend: AwsBackend) -> None:
    with serving(backend, {"WORKSPACE_TURNS_PER_SECOND": "0"}) as api:
        tenant = Tenant(*new_workspace(api, "unlimited"))
        session_id = _session(api, tenant)

        statuses = [_turn(api, tenant, "predict", session_id).status for _ in range(12)]

        # The slow-turn cap stays on (its own setting), without the rate's counter.
        assert isinstance(api.container.adapters.turn_limiter, SlowTurnLimiter)
        assert statuses == [200] * 12
    off = {"WORKSPACE_TURNS_PER_SECOND": "0", "WORKSPACE_MAX_SLOW_TURNS": "0"}
    with serving(backend, off) as api:
        assert isinstance(api.container.adapters.turn_limiter, NoTurnLimit)
