"""Figure 22 (the turn limiter at scale), run small on moto: its verdicts hold, and they
would catch a hot item, a flood let through or a workspace refused under its limit. The
figure itself, at up to 10,000 turns a second, runs under ``make bench``."""

from __future__ import annotations

from typing import Any

from bench.limiter_scale import (
    ScalePlan,
    Scenario,
    default_limiter,
    flood_scenario,
    limiter_scale_figure,
    render_limiter_scale,
    simulate,
    under_limit_scenario,
    verdicts,
)
from bench.render import render
from bench.stats import table
from tests.support.turn_limits import turn_limits_table

SMALL = ScalePlan(
    at_limit=((10, 5, 1, 10), (200, 1, 0.5, 50)),
    under_limit=under_limit_scenario(200, 1, 0.5, 50),
    floods=(flood_scenario(40, 3, 20),),
)


def test_the_limiter_keeps_every_item_under_its_ceiling_floods_out_and_its_workspace_in() -> None:
    figure = limiter_scale_figure(lambda message: None, SMALL)

    assert all(figure["verdicts"].values()), figure["verdicts"]
    by_label = {run["scenario"]["label"]: run for run in figure["runs"]}
    small, sharded = by_label["at its limit, R = 10"], by_label["at its limit, R = 200"]
    # The defaults: one item, the workspace's own id, as before; at 200 a second, two.
    assert (small["items"], small["hottest_item"]) == (1, small["workspace"])
    assert sharded["items"] == sharded["shards"] == 2
    assert sharded["hottest_writes_per_turn"] <= 0.75  # about half, where one item takes all
    assert small["refusedShare"] == 0 and sharded["refusedShare"] == 0
    flood = by_label["flood (3 x R) from 20 environments, R = 40"]
    assert 0.5 < flood["refusedShare"] < 0.7  # two thirds of a flood at three times the rate
    assert flood["admitted_by_second"][-1] <= 1.1 * 40

    text = render_limiter_scale(figure, table, "22. The turn limiter at scale")
    assert text.count("PASS") == len(figure["runs"]) + 1 and "FAIL" not in text
    results = {
        "meta": {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0},
        "limiterScale": figure,
    }
    assert "\n22. The turn limiter at scale" in render(results)


def _run(label: str, **measured: Any) -> dict[str, Any]:
    return {
        "scenario": {"label": label, "containers": 20},
        "hottest_writes_per_turn": 0.01,
        "itemCeilingPerTurn": 0.02,
        "refusedShare": 0.0,
        "floodExcess": 0.0,
        **measured,
    }


def test_the_verdicts_catch_a_hot_item_a_leaky_flood_and_an_unfair_limit() -> None:
    assert not verdicts([_run("at its limit, R = 10,000", hottest_writes_per_turn=1.0)], 1, 40)[
        "at its limit, R = 10,000"
    ]
    assert not verdicts([_run("flood (3 x R)", floodExcess=2.0)], 1, 40)["flood (3 x R)"]
    assert not verdicts([_run("under it (90%)", refusedShare=0.05)], 1, 40)["under it (90%)"]
    assert not verdicts([], 4, 40)["defaults unchanged (one item, burst 40)"]


def test_many_environments_that_each_saw_little_still_count_every_turn() -> None:
    # What a limiter trusting each environment's memory got wrong: a flood through 600
    # environments that each see a turn every two seconds was let through whole.
    flood = Scenario("flood through many", 20, 20, 60, 3, 600, seed=5)
    with turn_limits_table("limits") as (client, _):
        run = simulate(flood, default_limiter(8)(20, 20), client, "limits")
    assert run.flood_excess <= 0.1 and run.admitted <= 20 + 3 * 20 + 2
