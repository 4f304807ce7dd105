"""Figure 22: the turn limiter at scale, simulated on moto.

Lambda runs one request per execution environment, so at thousands of turns a second a
workspace's turns arrive through thousands of environments, each with a limiter of its
own that remembers only what its own requests saw. The simulation builds that: many
limiters (``containers``), one per simulated environment, all over one moto table, on a
simulated clock; turns arrive at random (Poisson) and each goes to a random
environment. Every write request on the table (a failed conditional write too: DynamoDB
bills and throttles it like any write) is counted per item key and per simulated
second, as DynamoDB's partitions would see it.

Reported per run: the hottest item's writes in its busiest second, and per turn (the
contract asks at most ``200 / R`` at ``R`` turns a second: no item over 200 writes a
second); the limiter's write requests per turn; the share of turns refused; and, for a
flood, how far each second's admitted turns exceed what one exact limiter (the generic
cell rate algorithm on one counter, no races) admits of the same arrivals.

The runs: the workspace at its limit at ``R`` = 10 (the defaults), 100, 1,000, 5,000
and 10,000; under its limit (90%) with a burst of one second, for fairness; a flood at
three times the limit from 20 environments. ``simulate`` is the engine, given the
limiter to build; ``tests/integration/test_limiter_scale.py`` runs it small.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

WRITE_OPERATIONS = ("PutItem", "UpdateItem", "DeleteItem")
# The contract's ceiling for one item, writes a second (DynamoDB's is about 1,000).
ITEM_WRITES_PER_SECOND = 200
# The verdicts the issue asks for.
MAX_FLOOD_EXCESS = 0.10
MAX_REFUSED_UNDER_LIMIT = 0.01
# How long a simulated environment keeps a turn (it serves turns one at a time).
TURN_SECONDS = 2.0


@dataclass(frozen=True)
class Scenario:
    """Turns at ``offered`` a second (Poisson) for ``seconds``, through ``containers``
    environments, against a limit of ``rate`` a second with ``burst`` at once (and
    ``max_slow_turns``, whose set shares the limiter's items); measured after
    ``warmup`` seconds of the same traffic (environments that have served a while)."""

    label: str
    rate: int
    burst: int
    offered: float
    seconds: float
    containers: int
    warmup: float = 0.0
    max_slow_turns: int = 8
    seed: int = 21


@dataclass
class Run:
    """What one scenario measured."""

    scenario: Scenario
    workspace: str = ""
    turns: int = 0
    admitted: int = 0
    writes: int = 0
    items: int = 0
    hottest_item: str = ""
    hottest_writes_per_second: int = 0
    hottest_writes_per_turn: float = 0.0
    admitted_by_second: list[int] = field(default_factory=list)
    exact_by_second: list[int] = field(default_factory=list)

    @property
    def refused_share(self) -> float:
        return (self.turns - self.admitted) / self.turns if self.turns else 0.0

    @property
    def writes_per_turn(self) -> float:
        return self.writes / self.turns if self.turns else 0.0

    @property
    def flood_excess(self) -> float:
        """How far the busiest second's admitted turns exceed the exact limiter's."""
        pairs = zip(self.admitted_by_second, self.exact_by_second, strict=True)
        ratios = [admitted / exact - 1 for admitted, exact in pairs if exact]
        return max(ratios, default=0.0)

    @property
    def item_ceiling_per_turn(self) -> float:
        return ITEM_WRITES_PER_SECOND / self.scenario.rate

    def to_dict(self) -> dict[str, Any]:
        found = {k: v for k, v in asdict(self).items() if k != "scenario"}
        return {
            **found,
            "scenario": asdict(self.scenario),
            "refusedShare": self.refused_share,
            "writesPerTurn": self.writes_per_turn,
            "floodExcess": self.flood_excess,
            "itemCeilingPerTurn": self.item_ceiling_per_turn,
        }


def arrivals(scenario: Scenario) -> list[tuple[float, int]]:
    """Each turn's time (simulated seconds from the end of the warm-up, which is before
    0) and the environment it reaches."""
    rng = random.Random(scenario.seed)
    found: list[tuple[float, int]] = []
    at = rng.expovariate(scenario.offered) - scenario.warmup
    while at < scenario.seconds:
        found.append((at, rng.randrange(scenario.containers)))
        at += rng.expovariate(scenario.offered)
    return found


def exact_admissions(rate: float, burst: int, times: Sequence[float]) -> list[bool]:
    """What one exact limiter admits of turns at ``times``: GCRA on one counter."""
    interval = 1 / rate
    tolerance = (burst - 1) * interval
    tat = -math.inf
    admitted = []
    for at in times:
        fits = tat <= at + tolerance + 1e-9
        if fits:
            tat = max(tat, at) + interval
        admitted.append(fits)
    return admitted


# A limiter for a simulated environment: ``make(client, table, clock)`` -> has ``admit``.
MakeLimiter = Callable[[Any, str, Any], Any]


def simulate(
    scenario: Scenario,
    make_limiter: MakeLimiter,
    client: Any,
    table: str,
    workspace: str | None = None,
) -> Run:
    """Run ``scenario`` on ``table`` (moto, through ``client``) for ``workspace`` (one no
    other run used: the clock starts at the same time each run): every environment gets
    a limiter of its own from ``make_limiter``, on one simulated clock."""
    from convo_memory.domain.errors import RateLimited
    from tests.fakes.adapters import FakeClock

    clock = FakeClock()
    start = clock()
    written: Counter[tuple[str, int]] = Counter()

    def count_write(params: dict[str, Any], **_: Any) -> None:
        key = params.get("Key") or params.get("Item") or {}
        written[(str(key.get("id", {}).get("S", "?")), math.floor(clock() - start))] += 1

    hooks = [f"before-parameter-build.dynamodb.{op}" for op in WRITE_OPERATIONS]
    for hook in hooks:
        client.meta.events.register(hook, count_write)
    limiters: dict[int, Any] = {}
    turns = arrivals(scenario)
    measured = [at for at, _ in turns if at >= 0]
    run = Run(scenario, workspace or f"ws-{scenario.seed}", turns=len(measured))
    seconds = math.ceil(scenario.seconds)
    run.admitted_by_second = [0] * seconds
    try:
        for at, container in turns:
            clock.now = start + at
            limiter = limiters.get(container)
            if limiter is None:
                limiter = limiters[container] = make_limiter(client, table, clock)
            try:
                limiter.admit(run.workspace)
            except RateLimited:
                continue
            if at >= 0:
                run.admitted += 1
                run.admitted_by_second[int(at)] += 1
    finally:
        for hook in hooks:
            client.meta.events.unregister(hook, count_write)
    exact = exact_admissions(scenario.rate, scenario.burst, [at for at, _ in turns])
    run.exact_by_second = [0] * seconds
    for (at, _), fits in zip(turns, exact, strict=True):
        if at >= 0:
            run.exact_by_second[int(at)] += fits
    _hottest(run, Counter({k: v for k, v in written.items() if k[1] >= 0}), measured)
    return run


def _hottest(run: Run, written: Counter[tuple[str, int]], measured: list[float]) -> None:
    """The item with the most writes in one whole second, and that per turn of it."""
    run.writes = sum(written.values())
    run.items = len({item for item, _ in written})
    whole = int(run.scenario.seconds)  # a last partial second would flatter the figure
    arrived = Counter(int(at) for at in measured if at < whole)
    busiest = [(count, item, second) for (item, second), count in written.items() if second < whole]
    if not busiest:
        return
    count, item, _ = max(busiest)
    run.hottest_item, run.hottest_writes_per_second = item, count
    run.hottest_writes_per_turn = max(
        c / arrived[s] for (_, s), c in written.items() if s < whole and arrived[s]
    )


# -- figure 22 --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalePlan:
    """What figure 22 runs: the workspace at its limit at each of ``rates`` (each with
    ``(seconds, warmup, containers)``), under it for fairness, and a flood."""

    at_limit: tuple[tuple[int, float, float, int], ...]
    under_limit: Scenario
    floods: tuple[Scenario, ...]


def at_limit_scenario(rate: int, seconds: float, warmup: float, containers: int) -> Scenario:
    # The template's ratio of burst to rate (40 at once for 10 a second).
    return Scenario(
        f"at its limit, R = {rate:,}", rate, 4 * rate, rate, seconds, containers, warmup, seed=rate
    )


def under_limit_scenario(rate: int, seconds: float, warmup: float, containers: int) -> Scenario:
    # A burst of one second (less room than the template's four), 90% of the limit.
    return Scenario(
        f"under it (90%), R = {rate:,}, burst {rate:,}",
        rate,
        rate,
        0.9 * rate,
        seconds,
        containers,
        warmup,
        seed=90,
    )


def flood_scenario(rate: int, seconds: float, containers: int) -> Scenario:
    return Scenario(
        f"flood (3 x R) from {containers:,} environments, R = {rate:,}",
        rate,
        rate,
        3 * rate,
        seconds,
        containers,
        seed=containers,
    )


# Each environment has served about three of the workspace's turns before the measure
# (Lambda's environments live for minutes to hours); the floods start cold.
FULL_PLAN = ScalePlan(
    at_limit=(
        (10, 30, 6, 20),
        (100, 10, 3, 100),
        (1000, 2, 1, 300),
        (5000, 1, 0.3, 500),
        (10_000, 1, 0.2, 600),
    ),
    under_limit=under_limit_scenario(1000, 2, 1, 300),
    floods=(flood_scenario(500, 3, 20), flood_scenario(100, 4, 1000)),
)
QUICK_PLAN = ScalePlan(
    at_limit=((10, 20, 6, 20), (100, 5, 3, 100), (1000, 1, 1, 300)),
    under_limit=under_limit_scenario(1000, 1, 1, 300),
    floods=(flood_scenario(300, 3, 20), flood_scenario(100, 3, 1000)),
)


def default_limiter(max_slow_turns: int) -> Callable[[int, int], MakeLimiter]:
    """The production limiter (rate limit and slow-turn cap, as ``production.py`` builds
    them) for a rate and a burst."""

    def for_limit(rate: int, burst: int) -> MakeLimiter:
        def build(client: Any, table: str, clock: Any) -> Any:
            from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
            from convo_memory.adapters.dynamo.slow_turns import SlowTurnCap, SlowTurns
            from convo_memory.adapters.dynamo.table import DynamoTable
            from tests.fakes.adapters import FakeMetrics

            store, metrics = DynamoTable(client, table), FakeMetrics()
            cap = SlowTurnCap(max_slow_turns, 300)
            slow = SlowTurns(store, cap, metrics, clock, item_expiry_seconds=360, rate=rate)
            limit = RateLimit(rate, burst)
            return WorkspaceRateLimiter(store, limit, metrics, clock, slow, min_item_seconds=300)

        return build

    return for_limit


def limiter_scale_figure(
    progress: Callable[[str], None],
    plan: ScalePlan = FULL_PLAN,
    limiter: Callable[[int, int], MakeLimiter] | None = None,
) -> dict[str, Any]:
    """Figure 22 (see the module docstring)."""
    from convo_memory.adapters.dynamo.limiter_layout import LimiterLayout
    from tests.support.turn_limits import turn_limits_table

    for_limit = limiter or default_limiter(8)
    scenarios = [
        *(at_limit_scenario(rate, sec, warm, envs) for rate, sec, warm, envs in plan.at_limit),
        plan.under_limit,
        *plan.floods,
    ]
    runs = []
    with turn_limits_table("limits") as (client, _):
        for number, scenario in enumerate(scenarios):
            progress(f"the turn limiter simulated: {scenario.label}")
            make = for_limit(scenario.rate, scenario.burst)
            run = simulate(scenario, make, client, "limits", f"ws-{number}")
            layout = LimiterLayout(scenario.rate, scenario.burst, scenario.max_slow_turns)
            runs.append({**run.to_dict(), "shards": layout.rate_shards})
    small = LimiterLayout(10, 40, 8)
    return {
        "runs": runs,
        "defaults": {
            "shards": small.rate_shards,
            "slowShards": small.slow_shards,
            "shardBurst": small.shard_burst,
        },
        "verdicts": verdicts(runs, small.rate_shards, small.shard_burst),
    }


def verdicts(runs: list[dict[str, Any]], default_shards: int, default_burst: int) -> dict[str, Any]:
    """The issue's checks of the runs: the hottest item at its limit (at most ``200 / R``
    writes a turn), nothing changed at the defaults (one item, the whole burst), a flood
    over the exact limit by at most 10% in any second, at most 1% refused under it."""
    found: dict[str, Any] = {}
    for run in runs:
        label, scenario = run["scenario"]["label"], run["scenario"]
        if label.startswith("at its limit"):
            found[label] = run["hottest_writes_per_turn"] <= run["itemCeilingPerTurn"]
        elif label.startswith("under it"):
            found[label] = run["refusedShare"] <= MAX_REFUSED_UNDER_LIMIT
        else:
            found[label] = run["floodExcess"] <= MAX_FLOOD_EXCESS and scenario["containers"] > 0
    found["defaults unchanged (one item, burst 40)"] = default_shards == 1 and default_burst == 40
    return found


def render_limiter_scale(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = [
        [
            run["scenario"]["label"],
            f"{run['scenario']['containers']:,}",
            f"{run['turns']:,}",
            f"{run['refusedShare']:.1%}",
            f"{run['writesPerTurn']:.2f}",
            run["shards"],
            run["hottest_writes_per_second"],
            f"{run['hottest_writes_per_turn']:.3f} <= {run['itemCeilingPerTurn']:.3f}"
            if run["scenario"]["label"].startswith("at its limit")
            else "-",
            f"{run['floodExcess']:+.1%}" if "flood" in run["scenario"]["label"] else "-",
            "PASS" if figure["verdicts"][run["scenario"]["label"]] else "FAIL",
        ]
        for run in figure["runs"]
    ]
    defaults = figure["defaults"]
    unchanged = figure["verdicts"]["defaults unchanged (one item, burst 40)"]
    return "\n".join(
        [
            title,
            "one workspace through many Lambda environments, each with a limiter of its own,"
            " on moto with a simulated clock; Poisson arrivals; every write request on the"
            " limiter's table (failed conditional writes too) counted per item and second",
            "",
            table(
                [
                    "run",
                    "envs",
                    "turns",
                    "refused",
                    "writes/turn",
                    "shards",
                    "hottest item, writes in a second",
                    "hottest per turn <= 200/R",
                    "over the exact limit",
                    "verdict",
                ],
                rows,
            ),
            f"at the defaults (10 a second, 40 at once): {defaults['shards']} shard and"
            f" {defaults['slowShards']} slow-turn set, burst {defaults['shardBurst']}: the one"
            f" item per workspace of before ({'PASS' if unchanged else 'FAIL'}). Floods are"
            " compared second by second with one exact limiter fed the same turns; a flood's"
            " extra writes are refusals, which DynamoDB throttles (a refusal too) past ~1,000"
            " a second on one item.",
        ]
    )
