"""Figures 11 and 12: what the turn rate limit costs, and what an outage of DynamoDB and
SQS together costs in turns.

11. The limiter (``adapters/dynamo/rate_limit.py``) under the template's defaults
    (WorkspaceTurnsPerSecond, WorkspaceTurnBurst), on moto with an injected clock:
    DynamoDB requests and write units (``bench.capacity``, DynamoDB's billing rules) per
    turn for steady traffic, a 16-turn burst and a 4-second flood at 50 turns a second,
    priced per million turns at DynamoDB's on-demand write price.
12. ``tests.support.outage_soak``: turns while a share of transcript writes and SQS
    sends fail at random, then the faults stop; the answered turns lost and duplicated,
    and the seconds until every repair path was empty, at 25% and 60%.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.prices import DYNAMODB_USD_PER_MILLION_WRITE_UNITS

MILLION = 1_000_000
SOAK_RATES = (0.25, 0.60)


def _scenarios(rate: int, burst: int) -> dict[str, list[float]]:
    """Arrival times (seconds) of each scenario's turns, one workspace each."""
    return {
        f"steady, {rate // 2} a second for 60 s": [i / (rate // 2) for i in range(30 * rate)],
        "16 at the same moment": [0.0] * 16,
        "20 a second for 3 s": [i * 0.05 for i in range(60)],
        "flood, 50 a second for 4 s": [i * 0.02 for i in range(200)],
    }


def rate_limit_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    from bench.capacity import CapacityMeter, TableSpec
    from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
    from convo_memory.adapters.dynamo.table import DynamoTable
    from convo_memory.domain.errors import RateLimited
    from local_runtime.aws_resources import DEFAULT_TEMPLATE, load_template, parameter_defaults
    from tests.fakes.adapters import FakeClock, FakeMetrics
    from tests.support.turn_limits import turn_limits_table

    defaults = parameter_defaults(load_template(DEFAULT_TEMPLATE))
    limit = RateLimit(int(defaults["WorkspaceTurnsPerSecond"]), int(defaults["WorkspaceTurnBurst"]))
    progress("the turn rate limit's DynamoDB cost")
    rows = []
    with turn_limits_table("limits") as (client, side):
        meter = CapacityMeter(client, side, {"limits": TableSpec(("id",))})
        for index, (label, arrivals) in enumerate(_scenarios(int(limit.rate), limit.burst).items()):
            clock = FakeClock()
            start = clock()
            limiter = WorkspaceRateLimiter(
                DynamoTable(client, "limits"), limit, FakeMetrics(), clock
            )
            meter.reset()
            admitted = 0
            for at in arrivals:
                clock.now = start + at
                try:
                    limiter.admit(f"ws-{index}")
                    admitted += 1
                except RateLimited:
                    pass
            units = meter.reset()
            turns = len(arrivals)
            rows.append(
                {
                    "scenario": label,
                    "turns": turns,
                    "admitted": admitted,
                    "requests": sum(units.requests.values()),
                    "writeUnits": units.table_write_units,
                    "writeUnitsPerTurn": units.table_write_units / turns,
                    "usdPerMillionTurns": units.table_write_units
                    / turns
                    * DYNAMODB_USD_PER_MILLION_WRITE_UNITS,
                }
            )
    return {"rate": limit.rate, "burst": limit.burst, "rows": rows}


def outage_figure(turns: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from tests.support.outage_soak import run_outage_soak

    results = []
    for rate in SOAK_RATES:
        progress(f"{turns} turns while {rate:.0%} of writes and sends fail")
        results.append(run_outage_soak(rate, turns=turns).to_dict())
    return {"turns": turns, "runs": results}


def render_rate_limit(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = [
        [
            r["scenario"],
            r["turns"],
            r["admitted"],
            r["requests"],
            f"{r['writeUnitsPerTurn']:.2f}",
            f"${r['usdPerMillionTurns']:.3f}",
        ]
        for r in figure["rows"]
    ]
    return "\n".join(
        [
            title,
            f"defaults: {figure['rate']:g} turns a second, {figure['burst']} at once;"
            f" DynamoDB on demand ${DYNAMODB_USD_PER_MILLION_WRITE_UNITS} per million write units"
            " (WRU); admitted: turns let through; UpdateItem: the limit's requests",
            "",
            table(["scenario", "turns", "admitted", "UpdateItem", "WRU/turn", "USD/M turns"], rows),
            "an admitted turn is one conditional UpdateItem (1 WRU); a refusal the container"
            " already knows costs nothing, so a flood costs less per turn than steady traffic.",
        ]
    )


def render_outage(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = [
        [
            f"{r['fault_rate']:.0%}",
            r["answered"],
            r["faults_injected"],
            r["unrecorded_answers"],
            r["queued_repairs"],
            r["invoked_repairs"],
            f"{r['lost']} ({r['lostShare']:.1%})",
            r["duplicated"],
            "-" if r["settled_after_seconds"] is None else f"{r['settled_after_seconds']:.0f} s",
        ]
        for r in figure["runs"]
    ]
    return "\n".join(
        [
            title,
            f"{figure['turns']} turns over 20 sessions, 4 a second; transcript writes and SQS"
            " sends fail at random, then stop (tests/support/outage_soak.py)",
            "faults: writes and sends that failed; recorded: false: answers given before their"
            " transcript write landed, repaired through the RepairQueue or, when it too"
            " failed, by invoking RepairFunction; lost: answered but never recorded;"
            " duplicated: recorded twice; all landed after: seconds from the faults' end until"
            " every repair landed",
            "",
            table(
                [
                    "failing",
                    "answered",
                    "faults",
                    "recorded: false",
                    "to RepairQueue",
                    "to RepairFunction",
                    "lost",
                    "duplicated",
                    "all landed after",
                ],
                rows,
            ),
        ]
    )
