"""The slow-turn cap on moto, without HTTP (adapters/dynamo/slow_turns.py and
slow_turn_watch.py): a fast turn costs nothing beyond the rate limit's one write, a
slow turn two write units (DynamoDB's billing rules, bench/capacity.py); a turn past its
first second registers with a conditional write, and one over the cap is given up there
(``RateLimited``) and writes nothing, however many started together; a workspace at its
cap is refused at admission while others are not; an entry a killed environment left
stops counting at its expiry.

"A second has passed" is the ``FirstSecond`` fake's ``slow`` switch; turns are callables
that wait for the test to let them end; the clock is fake."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from bench.capacity import CapacityMeter, TableSpec
from convo_memory.adapters.dynamo.limiter_layout import item_key
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
from convo_memory.domain.turn_abandonment import before_writing, check_not_abandoned
from tests.fakes.adapters import FakeClock, FakeMetrics, FirstSecond
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

    def __init__(
        self, client: Any, clock: FakeClock, *, rated: bool = True, cap: int = CAP, rate: int = 10
    ) -> None:
        self.metrics = FakeMetrics()
        self.first_second = FirstSecond()
        table = DynamoTable(client, TABLE)
        self.slow = SlowTurns(
            table,
            SlowTurnCap(cap, LIFETIME),
            self.metrics,
            clock,
            item_expiry_seconds=LIFETIME + 60,
            rate=rate if rated else 0,
            first_second=self.first_second,
        )
        self.limiter: Any = (
            WorkspaceRateLimiter(
                table,
                RateLimit(rate, 40),
                self.metrics,
                clock,
                self.slow,
                min_item_seconds=LIFETIME,
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


class Turn:
    """A turn run through a limiter on a thread of the test's: it waits until ``end``,
    then writes what it made (``written``, unless it was given up meanwhile)."""

    def __init__(self, container: Container, written: list[str], workspace: str = "ws-a") -> None:
        self.begun = threading.Event()
        self._end = threading.Event()
        self.outcome: str | BaseException | None = None
        self._written = written
        self._runner = threading.Thread(target=self._run, args=(container, workspace), daemon=True)
        self._runner.start()

    def _body(self) -> str:
        self.begun.set()
        self._end.wait(30)
        check_not_abandoned()
        before_writing()
        self._written.append("turn")
        return "answered"

    def _run(self, container: Container, workspace: str) -> None:
        try:
            self.outcome = container.limiter.run(workspace, self._body, 30.0)
        except BaseException as exc:
            self.outcome = exc

    def end(self) -> Turn:
        self._end.set()
        return self

    def join(self) -> str | BaseException | None:
        self._runner.join(30)
        return self.outcome


def _counted(container: Container, metric: str, count: int) -> bool:
    return container.metrics.counts[metric] == count


def _eventually(condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition()``: the turns' threads have got there."""
    for _ in range(1000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the turns never got there")


def _item(client: Any, workspace: str = "ws-a", shard: int = 0) -> dict[str, Any]:
    found = client.get_item(TableName=TABLE, Key=item_key(workspace, shard)).get("Item")
    return dict(found or {})


def _slow_now(client: Any, workspace: str = "ws-a") -> int:
    return len(slow_entries(_item(client, workspace)))


def _slow_turns(client: Any, container: Container, count: int) -> list[Turn]:
    """``count`` admitted turns that run past their first second (left in flight), each
    registered (its request over) and seen in the table through ``client``."""
    container.first_second.slow = True
    turns = []
    registered = container.metrics.counts["SlowTurns"]
    for index in range(count):
        assert container.admitted()
        turns.append(Turn(container, []))
        _eventually(partial(_counted, container, "SlowTurns", registered + index + 1))
    assert _slow_now(client) == count
    return turns


def _end_all(turns: list[Turn]) -> list[str | BaseException | None]:
    return [turn.end().join() for turn in turns]


def test_a_fast_turn_writes_only_the_rate_limits_update(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    for _ in range(5):
        assert container.admitted()
        assert container.limiter.run("ws-a", lambda: "fast", 30.0) == "fast"
    assert container.first_second.asked == 5
    assert "slow" not in _item(client)
    assert container.metrics.counts["SlowTurns"] == 0


def test_a_slow_turn_costs_two_write_units_and_a_fast_one_none(clients: tuple[Any, Any]) -> None:
    client, side = clients
    clock = FakeClock()
    container = Container(client, clock)
    written: list[str] = []
    others = _slow_turns(side, container, CAP - 1)  # a busy workspace, under its cap
    meter = CapacityMeter(client, side, {TABLE: TableSpec(("id",))})
    container.first_second.slow = False
    assert container.admitted()  # a fast turn: only the rate limit's write
    container.limiter.run("ws-a", lambda: "fast", 30.0)
    fast = meter.reset()
    assert fast.requests == {"UpdateItem": 1} and fast.table_write_units == 1

    container.first_second.slow = True  # a slow turn, apart from its admission
    slow = Turn(container, written)
    _eventually(lambda: container.metrics.counts["SlowTurns"] == CAP)
    assert _slow_now(side) == CAP
    assert slow.end().join() == "answered"
    units = meter.reset()
    assert units.requests == {"UpdateItem": 2} and units.table_write_units == 2
    _end_all(others)
    assert container.metrics.counts["SlowTurns"] == CAP
    assert _slow_now(side) == 0


def test_turns_started_together_over_the_cap_are_given_up_at_their_first_second(
    client: Any,
) -> None:
    # Six turns admitted at the same moment, while no turn was slow yet: the admission
    # saw room for all of them; at their first second three find a place, and three are
    # refused there and write nothing, however they end.
    clock = FakeClock()
    container = Container(client, clock)
    written: list[str] = []
    assert all(container.admitted() for _ in range(6))
    container.first_second.slow = True
    turns = [Turn(container, written) for _ in range(6)]
    _eventually(
        lambda: _slow_now(client) + sum(isinstance(t.outcome, RateLimited) for t in turns) == 6
    )

    refused = [turn for turn in turns if isinstance(turn.outcome, RateLimited)]
    assert len(refused) == 3 and _slow_now(client) == CAP
    assert "slow turns in flight" in str(refused[0].outcome)
    outcomes = _end_all(turns)
    assert outcomes.count("answered") == CAP
    assert written == ["turn"] * CAP  # the given-up turns wrote nothing
    assert container.metrics.counts["TurnsOverSlowCap"] == 3
    assert _slow_now(client) == 0


def test_a_turn_already_writing_when_refused_is_left_to_end(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    in_flight = _slow_turns(client, container, CAP)
    writing_begun = threading.Event()

    def writing() -> str:
        before_writing()  # it has begun writing what it made
        writing_begun.set()
        return "recorded"

    container.first_second.until = writing_begun  # its first second ends after that
    assert container.limiter.run("ws-a", writing, 30.0) == "recorded"  # not given up
    assert container.metrics.counts["TurnsOverSlowCap"] == 0
    assert _slow_now(client) == CAP
    _end_all(in_flight)


def test_a_workspace_at_its_cap_is_refused_at_admission_and_others_are_not(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    in_flight = _slow_turns(client, container, CAP)
    assert not container.admitted()
    assert container.admitted("ws-b")
    other = Container(client, clock)  # another environment learns it from its write
    assert not other.admitted() and other.admitted("ws-b")
    assert container.metrics.counts["TurnsOverSlowCap"] == 1
    assert other.metrics.counts["TurnsOverSlowCap"] == 1
    _end_all(in_flight)
    # All three ended: a place is free again, for the environment that ended them at
    # once and for the other one after its refusal's Retry-After.
    assert slow_entries(_item(client)) == []
    assert container.admitted()
    assert not other.admitted()  # still within the second it told its client to wait
    clock.advance(1.0)
    assert other.admitted()


def test_a_refusal_the_container_knows_costs_no_request(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    in_flight = _slow_turns(client, container, CAP)
    calls: list[int] = []
    client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(1))
    refused = [container.admitted() for _ in range(20)]
    assert not any(refused)
    assert len(calls) == 1  # the first refusal's failed write; then none for a second
    clock.advance(1.0)
    assert not container.admitted() and len(calls) == 2
    _end_all(in_flight)


def test_a_killed_containers_entries_stop_counting_at_their_expiry(client: Any) -> None:
    clock = FakeClock()
    killed = Container(client, clock)
    for _ in range(CAP):  # registered, never removed: Lambda killed the environment
        assert killed.admitted()
        assert killed.slow.register("ws-a", killed.slow.new_entry(30.0)).shard == 0
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


def test_a_registration_that_finds_only_expired_entries_takes_their_place(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    for _ in range(CAP):
        container.slow.register("ws-a", container.slow.new_entry(30.0))
    clock.advance(36)
    assert container.slow.register("ws-a", container.slow.new_entry(30.0)).shard == 0
    assert len(slow_entries(_item(client))) == 1
    assert container.metrics.counts["SlowTurnsExpired"] == CAP


def test_without_a_rate_limit_admission_is_one_read_and_a_fast_turn_writes_nothing(
    clients: tuple[Any, Any],
) -> None:
    client, side = clients
    clock = FakeClock()
    container = Container(
        client, clock, rated=False
    )  # the meter's client; the test looks with the other
    meter = CapacityMeter(client, side, {TABLE: TableSpec(("id",))})
    assert container.admitted()
    container.limiter.run("ws-a", lambda: "fast", 30.0)
    fast = meter.reset()
    assert fast.requests == {"GetItem": 1} and fast.table_write_units == 0
    assert fast.read_units == 0.5
    in_flight = _slow_turns(side, container, CAP)
    assert meter.reset().table_write_units == CAP  # one write each, so far
    assert not container.admitted()
    item = _item(client)
    assert "tat" not in item and int(item["expiresAt"]["N"]) > clock() + LIFETIME
    _end_all(in_flight)
    assert meter.reset().table_write_units == CAP  # and one more each at their end
    clock.advance(1.0)
    assert container.admitted()


def test_an_unavailable_table_never_fails_a_turn(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    assert container.admitted()
    remove = inject(client, "UpdateItem", lambda params: dynamodb_error("InternalServerError", 500))
    container.first_second.slow = True
    written: list[str] = []
    try:
        turn = Turn(container, written)
        _eventually(lambda: container.metrics.counts["TurnLimiterUnavailable"] == 1)
        assert turn.end().join() == "answered"  # its entry could not be written: uncounted
        assert container.admitted()  # the rate limit fails open too
    finally:
        remove()
    assert written == ["turn"]
    assert container.metrics.counts["TurnLimiterUnavailable"] == 2
    assert slow_entries(_item(client)) == []


def test_a_throttled_set_refuses_the_slow_turn(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    assert container.admitted()
    remove = inject(
        client,
        "UpdateItem",
        lambda params: dynamodb_error("ProvisionedThroughputExceededException", 400),
    )
    container.first_second.slow = True
    written: list[str] = []
    try:
        turn = Turn(container, written)
        _eventually(lambda: turn.outcome is not None)
    finally:
        remove()
    assert isinstance(turn.end().join(), RateLimited)
    assert written == []
    assert container.metrics.counts["TurnLimiterThrottled"] == 1


def test_the_item_outlives_the_longest_turn_it_admitted(client: Any) -> None:
    clock = FakeClock()
    container = Container(client, clock)
    assert container.admitted()
    assert int(_item(client)["expiresAt"]["N"]) >= clock() + LIFETIME + 60


def test_a_large_cap_is_spread_over_shards_and_still_bounds_the_workspace(client: Any) -> None:
    # At 1,000 turns a second a cap of 32 is four sets of 8 (limiter_layout.py): the
    # turns that start together fill at most 32 places, never more than 8 on one item.
    clock = FakeClock()
    container = Container(client, clock, cap=32, rate=1000)
    assert container.slow.shards == 4
    entries = [container.slow.register("ws-a", container.slow.new_entry(30.0)) for _ in range(48)]
    placed = [entry for entry in entries if not entry.refused]
    per_item = [len(slow_entries(_item(client, "ws-a", shard))) for shard in range(4)]
    assert len(placed) == sum(per_item) <= 32 and max(per_item) <= 8
    assert len(placed) >= 28  # two tries each: nearly every place is taken
    assert len(container.slow.in_flight("ws-a")) == len(placed)
