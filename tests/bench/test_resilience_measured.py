"""Figures 11 and 12 of ``make bench``: the rate limit's cost per turn and the outage
soak's losses, measured and rendered."""

from __future__ import annotations

from bench.resilience import outage_figure, rate_limit_figure, render_outage, render_rate_limit
from bench.stats import table


def test_the_rate_limit_costs_at_most_one_write_unit_per_turn() -> None:
    figure = rate_limit_figure(lambda message: None)
    rows = {row["scenario"]: row for row in figure["rows"]}

    assert all(row["writeUnitsPerTurn"] <= 1.0 for row in rows.values())
    assert rows["16 at the same moment"]["admitted"] == 16
    assert rows["20 a second for 3 s"]["admitted"] == 60
    flood = rows["flood, 50 a second for 4 s"]
    assert flood["admitted"] < flood["turns"] and flood["usdPerMillionTurns"] < 0.625
    assert "USD/M turns" in render_rate_limit(figure, table, "11.")


def test_the_outage_figure_reports_both_fault_rates() -> None:
    figure = outage_figure(20, lambda message: None)

    assert [run["fault_rate"] for run in figure["runs"]] == [0.25, 0.60]
    assert all(run["answered"] == 20 and run["duplicated"] == 0 for run in figure["runs"])
    text = render_outage(figure, table, "12.")
    assert "25%" in text and "60%" in text and "lost" in text
