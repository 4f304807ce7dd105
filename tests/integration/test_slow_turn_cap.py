"""The slow-turn cap on moto, without HTTP (adapters/dynamo/slow_turns.py): a fast turn
costs nothing beyond the rate limit's one write, a slow turn two write units (DynamoDB's
billing rules, bench/capacity.py), a workspace at its cap is refused while others are
not, and an entry a killed container left stops counting at its expiry.

Timers are manual (``ManualTimers.fire`` is "a second has passed") and the clock fake."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from bench.capacity import CapacityMeter, TableSpec
from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
from convo_memory.adapters.dynamo.slow_turns import (
    SlowTurnCap,
    SlowTurnLimiter,
    SlowTurns,
    entry_expiry,
    slow_entries,
)
from convo_memory.adapters.dynamo.table import DynamoTable
from convo_memory.domain.errors import RateLimited
from tests.fakes.adapters import FakeClock, FakeMetrics, ManualTimers
from tests.support.faults import dynamodb_error, inject
from tests.support.turn_limits import TABLE, turn_limits_table

CAP = 3
LIFETIME = 300.0


@pytest.fixture
def clients() -> Iterator[tuple[Any, Any]]:
    with turn_limits_table() as both:
        yield both


@pytest.fixture
def client(clients: tuple[Any, Any]) -> Any:
    return clients[0]


class Container:
    """One execution environment's limiter (rate limit on or off) and what it saw."""

    def __init__(self, client: Any, clock: FakeClock, *, rated: bool = True) -> None:
        self.metrics = FakeMetrics()
        self.timers = ManualTimers()
        table = DynamoTable(client, TABLE)
        self.slow = SlowTurns(
            table,
            SlowTurnCap(CAP, LIFETIME),
            self.metrics,
            clock,
            self.timers,
            item_expiry_seconds=LIFETIME + 60,
            sets_item_expiry=not rated,
        )
        self.limiter: Any = (
            WorkspaceRateLimiter(
                table, RateLimit(10, 40), self.metrics, clock, self.slow, min_item_seconds=LIFETIME
            )
            if rated
            else SlowTurnLimiter(self.slow)
        )

    def admitted(self, workspace: str = "ws-a") -> bool:
        try:
            self.limiter.admit(workspace)
        except RateLimited as exc:
            assert exc.retry_after == 1
            return False
        return True


def _item(client: Any, workspace: str = "ws-a") -> dict[str, Any]:
    return dict(client.get_item(TableName=TABLE, Key={"id": {"S": workspace}}).get("Item") or {})


def _slow_turns(client: Any, stack: ExitStack, container: Container, count: int) -> None:
    """``count`` admitted turns that run past their first second (left in flight)."""
    for _ in range(count):
        assert container.admitted()
        stack.enter_context(container.limiter.slow_turn("ws-a", 30.0))
        container.timers.fire()


def test_a_fast_turn_writes_only_the_rate_limits_update(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    for _ in range(5):
        assert container.admitted()
        with container.limiter.slow_turn("ws-a", 30.0):
            pass
        # The turn ended before its first second was up: its timer never fires.
        assert container.timers.fire() == 0
    assert container.timers.started == 5
    assert "slow" not in _item(client)
    assert container.metrics.counts["SlowTurns"] == 0


def test_a_slow_turn_costs_two_write_units_and_a_fast_one_none(clients: tuple[Any, Any]) -> None:
    client, side = clients
    clock = FakeClock()
    container = Container(client, clock)
    meter = CapacityMeter(client, side, {TABLE: TableSpec(("id",))})
    with ExitStack() as others:
        _slow_turns(client, others, container, CAP - 1)  # a busy workspace, under its cap
        meter.reset()
        assert container.admitted()  # a fast turn: only the rate limit's write
        with container.limiter.slow_turn("ws-a", 30.0):
            pass
        fast = meter.reset()
        assert fast.requests == {"UpdateItem": 1} and fast.table_write_units == 1

        with container.limiter.slow_turn("ws-a", 30.0):  # a slow turn, apart from admission
            container.timers.fire()
            assert len(slow_entries(_item(side))) == CAP
        slow = meter.reset()
    assert slow.requests == {"UpdateItem": 2} and slow.table_write_units == 2
    assert container.metrics.counts["SlowTurns"] == CAP


def test_a_workspace_at_its_cap_is_refused_and_others_are_not(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    with ExitStack() as in_flight:
        _slow_turns(client, in_flight, container, CAP)
        assert not container.admitted()
        assert container.admitted("ws-b")
        other = Container(client, clock)  # another container learns it from its write
        assert not other.admitted() and other.admitted("ws-b")
        assert container.metrics.counts["TurnsOverSlowCap"] == 1
        assert other.metrics.counts["TurnsOverSlowCap"] == 1
    # All three ended: a slot is free again, for the container that ended them at once
    # and for the other one after its refusal's Retry-After.
    assert slow_entries(_item(client)) == []
    assert container.admitted()
    assert not other.admitted()  # still within the second it told its client to wait
    clock.advance(1.0)
    assert other.admitted()


def test_a_refusal_the_container_knows_costs_no_request(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    with ExitStack() as in_flight:
        _slow_turns(client, in_flight, container, CAP)
        calls: list[int] = []
        client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(1))
        refused = [container.admitted() for _ in range(20)]
        assert not any(refused)
        assert len(calls) == 1  # the first refusal's failed write; then none for a second
        clock.advance(1.0)
        assert not container.admitted() and len(calls) == 2


def test_a_killed_containers_entries_stop_counting_at_their_expiry(client: Any) -> None:
    clock = FakeClock()
    killed = Container(client, clock)
    frozen = []  # entered, never left: Lambda killed the environment mid-turn
    for _ in range(CAP):
        assert killed.admitted()
        frozen.append(killed.limiter.slow_turn("ws-a", 30.0))
        frozen[-1].__enter__()
        killed.timers.fire()
    entries = slow_entries(_item(client))
    assert len(entries) == CAP
    assert all(clock() + 30 <= entry_expiry(e) <= clock() + 30 + 5 for e in entries)
    # Never beyond the item: DynamoDB's TTL cannot delete it while an entry counts.
    assert int(_item(client)["expiresAt"]["N"]) > max(entry_expiry(e) for e in entries)

    survivor = Container(client, clock)
    assert not survivor.admitted()
    clock.advance(36)
    assert survivor.admitted()
    assert survivor.metrics.counts["SlowTurnsExpired"] == CAP
    assert slow_entries(_item(client)) == []


def test_without_a_rate_limit_admission_is_one_read_and_a_fast_turn_writes_nothing(
    clients: tuple[Any, Any],
) -> None:
    client, side = clients
    clock = FakeClock()
    container = Container(client, clock, rated=False)
    meter = CapacityMeter(client, side, {TABLE: TableSpec(("id",))})
    assert container.admitted()
    with container.limiter.slow_turn("ws-a", 30.0):
        pass
    fast = meter.reset()
    assert fast.requests == {"GetItem": 1} and fast.table_write_units == 0
    assert fast.read_units == 0.5
    with ExitStack() as in_flight:
        _slow_turns(client, in_flight, container, CAP)
        assert meter.reset().table_write_units == CAP  # one write each, so far
        assert not container.admitted()
        item = _item(client)
        assert "tat" not in item and int(item["expiresAt"]["N"]) > clock() + LIFETIME
    assert meter.reset().table_write_units == CAP  # and one more each at their end
    clock.advance(1.0)
    assert container.admitted()


def test_an_unavailable_table_never_fails_a_turn(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    assert container.admitted()
    remove = inject(
        client,
        "UpdateItem",
        lambda params: dynamodb_error("ProvisionedThroughputExceededException", 400),
    )
    with container.limiter.slow_turn("ws-a", 30.0):
        container.timers.fire()  # the entry cannot be written
    assert container.admitted()  # the rate limit fails open too
    remove()
    assert container.metrics.counts["TurnLimiterUnavailable"] == 2
    assert slow_entries(_item(client)) == []


def test_the_item_outlives_the_longest_turn_it_admitted(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    assert container.admitted()
    assert int(_item(client)["expiresAt"]["N"]) >= clock() + LIFETIME + 60
