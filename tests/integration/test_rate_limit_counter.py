"""The rate limiter's counter on moto, without HTTP: what it costs (one conditional
UpdateItem per admitted turn, nothing for a refusal a container already knows), and
that several containers sharing one workspace's item still admit burst + rate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.domain.errors import RateLimited
from tests.fakes.adapters import FakeClock, FakeMetrics
from tests.support.dynamo_meter import DynamoMeter
from tests.support.turn_limits import TABLE, turn_limits_table


@pytest.fixture
def client() -> Iterator[Any]:
    with turn_limits_table() as (dynamodb, _):
        yield dynamodb


def _limiter(client: Any, clock: FakeClock, rate: int = 10, burst: int = 40) -> Any:
    return WorkspaceRateLimiter(
        DynamoTable(client, TABLE), RateLimit(rate, burst), FakeMetrics(), clock
    )


def _admitted(limiter: Any, workspace: str = "ws-1") -> bool:
    try:
        limiter.admit(workspace)
    except RateLimited:
        return False
    return True


def test_an_admitted_turn_is_one_write_and_a_known_refusal_is_none(client: Any) -> None:
    clock = FakeClock()
    limiter = _limiter(client, clock)
    meter = DynamoMeter().attach(client)

    admitted = [_admitted(limiter) for _ in range(40)]
    assert all(admitted) and meter.requests == {"UpdateItem": 40}

    refused = [_admitted(limiter) for _ in range(100)]  # the flood
    assert not any(refused)
    # The last admitted write returned a full bucket: the refusals ask nothing.
    assert meter.requests == {"UpdateItem": 40}

    clock.advance(0.1)  # one interval later, one more turn
    assert _admitted(limiter) and not _admitted(limiter)
    assert meter.requests["UpdateItem"] == 41

    other = _limiter(client, clock)  # a container that has not seen the flood
    assert not _admitted(other) and not _admitted(other)
    assert meter.requests["UpdateItem"] == 42  # one failed write tells it


def test_a_quiet_workspace_earns_its_burst_back_at_the_rate(client: Any) -> None:
    clock = FakeClock()
    limiter = _limiter(client, clock, rate=10, burst=5)
    assert [_admitted(limiter) for _ in range(6)] == [True] * 5 + [False]

    clock.advance(0.3)
    assert [_admitted(limiter) for _ in range(4)] == [True] * 3 + [False]

    clock.advance(60)
    assert [_admitted(limiter) for _ in range(6)] == [True] * 5 + [False]


def test_containers_sharing_a_workspace_admit_the_burst_and_the_rate(client: Any) -> None:
    clock = FakeClock()
    containers = [_limiter(client, clock, rate=10, burst=20) for _ in range(4)]

    at_once = [_admitted(containers[i % 4]) for i in range(80)]
    # Each container that lost a race owes its turn to the item: one turn of slack each.
    assert 20 <= sum(at_once) <= 20 + len(containers)

    admitted_later = 0
    for step in range(100):  # 10 s at 40 turns a second, spread over the containers
        clock.advance(0.025)
        admitted_later += _admitted(containers[step % 4])
    # The rate holds across containers (what was owed is written with their next turns).
    assert 10 * 2.5 - len(containers) <= admitted_later <= 10 * 2.5 + len(containers)


def test_workspaces_have_counters_of_their_own(client: Any) -> None:
    clock = FakeClock()
    limiter = _limiter(client, clock, rate=1, burst=2)
    assert [_admitted(limiter, "noisy") for _ in range(3)] == [True, True, False]
    assert [_admitted(limiter, "quiet") for _ in range(2)] == [True, True]


def test_retry_after_is_when_the_next_turn_fits(client: Any) -> None:
    clock = FakeClock()
    limiter = _limiter(client, clock, rate=1, burst=3)
    for _ in range(3):
        limiter.admit("ws-1")
    for _ in range(4):  # a flood builds no backlog: refused turns are not counted
        with pytest.raises(RateLimited) as refused:
            limiter.admit("ws-1")
        assert refused.value.headers() == {"Retry-After": "1"}

    clock.advance(0.5)
    with pytest.raises(RateLimited) as refused:
        limiter.admit("ws-1")
    assert refused.value.headers() == {"Retry-After": "1"}
    clock.advance(0.5)
    limiter.admit("ws-1")
