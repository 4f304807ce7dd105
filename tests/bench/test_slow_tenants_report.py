"""Figure 17's text: a slow tenant next to a fast one, the cap off and on, from
measured counts (the figure itself runs under ``make bench``)."""

from __future__ import annotations

import json

from bench.render import render
from bench.slow_tenants import render_slow_tenants
from bench.stats import table


def sample_figure() -> dict[str, object]:
    def run(cap: int, fast_answered: int, p90: float, worst: float) -> dict[str, object]:
        return {
            "cap": cap,
            "slow": {"answered": 110, "refused": 17},
            "fast": {
                "answered": fast_answered,
                "refused": 0,
                "medianSeconds": 0.011,
                "p90Seconds": p90,
                "worstSeconds": worst,
            },
        }

    return {
        "toolSeconds": 5.0,
        "slowClients": 60,
        "windowSeconds": 10.0,
        "runs": [run(0, 8, 4.821, 4.82), run(8, 49, 0.008, 0.09)],
        "units": {"fast": 1.0, "slow": 3.0, "slowWithSevenInFlight": 3.0},
    }


def test_the_figure_puts_both_tenants_side_by_side_for_each_cap() -> None:
    text = render_slow_tenants(sample_figure(), table, "17. A slow tenant")

    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["off"], ["8"])]
    assert rows == [
        ["off", "110", "17", "8", "0", "11", "ms", "4821", "ms", "4.82", "s"],
        ["8", "110", "17", "49", "0", "11", "ms", "8", "ms", "0.09", "s"],
    ]
    assert "a fast turn 1 (the rate limit's), a slow turn 3 (2 for the cap)" in text
    json.dumps(sample_figure())  # what --json prints


def test_the_report_includes_figure_17() -> None:
    results = {
        "meta": {"quick": True, "python": "3.13", "cpus": 2, "seconds": 1.0},
        "slowTenants": sample_figure(),
    }

    assert "\n17. A slow tenant next to a fast one" in render(results)
