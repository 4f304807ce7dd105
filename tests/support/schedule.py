"""The order test modules run in, for ``make test``'s parallel workers (``--dist
loadfile --no-loadscope-reorder``: a worker takes the next module in this order when it
is almost done with its own). The longest modules start first and the many short unit
modules come last, so that no worker starts a long module when the others are nearly
done (xdist's own order, by number of tests, put the long one-test modules last).

Only the order changes, never what runs: a module missing from ``LONGEST_FIRST`` just
runs in its tier's place (tests/unit/test_test_tiers.py checks the list names modules
that exist)."""

from __future__ import annotations

# Measured longest (wall time, most of it waiting on a local runtime or a browser).
LONGEST_FIRST = (
    "tests/e2e/test_studio_browser.py",
    "tests/e2e/test_openapi_schemathesis.py",
    "tests/e2e/test_openai_door_e2e.py",
    "tests/e2e/test_summary_e2e.py",
    "tests/e2e/test_input_gate_property.py",
    "tests/e2e/test_local_runtime.py",
)
# Then tier by tier: processes and sockets wait more than they compute, in-process
# stacks compute, the unit tier fills the end.
TIER_ORDER = ("e2e", "bench", "integration", "contract", "client", "unit")


def module_rank(path: str) -> tuple[int, int]:
    """Where a test module (``tests/<tier>/test_x.py``, as in a node id) runs: the
    longest first, then by tier; modules of one rank in collection order."""
    if path in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(path))
    parts = path.split("/")
    tier = parts[1] if len(parts) > 2 else ""
    return (1, TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER))
