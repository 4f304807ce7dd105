"""Figure 17: a slow tenant next to a fast one, with the slow-turn cap off and on.

On the in-process stack (real handlers, moto tables, each function in as many
environments as its reserved concurrency, as under ``make run``: PredictFunction 50) with
the template's rate limit (10 turns a second, 40 at once). Tenant "slow" runs an agent
whose webhook tool takes ``TOOL_SECONDS`` to answer, from ``SLOW_CLIENTS`` clients that
each send turns back to back (waiting ``Retry-After`` after a 429); tenant "fast" sends
plain turns one after another, meanwhile, through the same function. Each run lasts
``WINDOW_SECONDS``; then the turns in flight finish. Reported per run: each tenant's turns
answered and refused, and the fast tenant's latency (median, 90th percentile, worst).

The cap's DynamoDB cost comes after, on moto with the adapter alone (manual timers, DynamoDB's
billing rules from ``bench.capacity``): the rate limit's item written by a fast turn and by
a slow one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench.stats import median, percentile

TOOL_SECONDS = 5.0
SLOW_CLIENTS = 60
WINDOW_SECONDS = 10.0
# The fast tenant starts a turn this often (5 a second, under its rate limit).
FAST_EVERY_SECONDS = 0.2
CAPS = (0, 8)
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}


def slow_tenant_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    """Figure 17 (see the module docstring)."""
    runs = []
    for cap in CAPS:
        progress(f"a slow tenant and a fast one, WorkspaceMaxSlowTurns={cap}")
        runs.append(_run(cap))
    progress("the slow-turn cap's write units")
    return {
        "toolSeconds": TOOL_SECONDS,
        "slowClients": SLOW_CLIENTS,
        "windowSeconds": WINDOW_SECONDS,
        "runs": runs,
        "units": _units(),
    }


def _run(cap: int) -> dict[str, Any]:
    from tests.fakes.webhook_server import Reply, WebhookServer
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    env = {
        "WORKSPACE_TURNS_PER_SECOND": "10",
        "WORKSPACE_TURN_BURST": "40",
        "WORKSPACE_MAX_SLOW_TURNS": str(cap),
    }
    with WebhookServer() as hook, inprocess_stack({**env, "TOOL_ALLOWED_HOSTS": hook.host}) as api:
        hook.answers["/order"] = Reply(200, {"output": "shipped"}, delay=TOOL_SECONDS)
        _, slow_token = new_workspace(api, "slow")
        _, fast_token = new_workspace(api, "fast")
        tool = {"name": "order", "description": "Orders", "inputSchema": SCHEMA}
        agent = api.call(
            "POST",
            "/v1/capabilities",
            token=slow_token,
            json_body={
                "name": "desk",
                "kind": "agent",
                "tools": [{**tool, "url": hook.url("/order")}],
            },
        ).body
        hook.secret = agent["toolSigningSecret"]
        slow = _Tenant(api, slow_token, agent["id"], "where is my order?")
        fast = _Tenant(api, fast_token, "cap-generative", "hello", every=FAST_EVERY_SECONDS)
        ends = time.monotonic() + WINDOW_SECONDS
        threads = [threading.Thread(target=slow.loop, args=(ends,)) for _ in range(SLOW_CLIENTS)]
        threads.append(threading.Thread(target=fast.loop, args=(ends,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    latencies = fast.latencies or [0.0]
    return {
        "cap": cap,
        "slow": slow.summary(),
        "fast": {
            **fast.summary(),
            "medianSeconds": median(latencies),
            "p90Seconds": percentile(latencies, 90),
            "worstSeconds": max(latencies),
        },
    }


class _Tenant:
    """Turns sent back to back until the window closes: what was answered, refused, and
    how long each answered turn took."""

    def __init__(
        self, api: Any, token: str, capability: str, text: str, every: float = 0.0
    ) -> None:
        self._api, self._token, self._capability, self._text = api, token, capability, text
        self._every = every
        self.latencies: list[float] = []
        self.answered = 0
        self.refused = 0
        self._lock = threading.Lock()

    def loop(self, ends: float) -> None:
        while time.monotonic() < ends:
            began = time.monotonic()
            response = self._api.call(
                "POST",
                f"/v1/capabilities/{self._capability}/predict",
                token=self._token,
                json_body={"input": self._text},
            )
            took = time.monotonic() - began
            with self._lock:
                if response.status == 429:
                    self.refused += 1
                else:
                    self.answered += 1
                    self.latencies.append(took)
            if response.status == 429:
                time.sleep(float(response.headers.get("Retry-After", "1")))
            else:
                time.sleep(max(0.0, began + self._every - time.monotonic()))

    def summary(self) -> dict[str, int]:
        return {"answered": self.answered, "refused": self.refused}


def _units() -> dict[str, float]:
    """Write units of the limiter's item: a fast turn (its admission), and a slow turn
    (its admission, its registration at its first second, its removal at its end)."""
    from bench.capacity import CapacityMeter, TableSpec
    from convo_memory.adapters.dynamo.rate_limit import RateLimit, WorkspaceRateLimiter
    from convo_memory.adapters.dynamo.slow_turns import SlowTurnCap, SlowTurns
    from convo_memory.adapters.dynamo.table import DynamoTable
    from tests.fakes.adapters import FakeClock, FakeMetrics
    from tests.support.turn_limits import turn_limits_table

    with turn_limits_table("limits") as (client, side):
        table, clock = DynamoTable(client, "limits"), FakeClock()
        slow = SlowTurns(
            table, SlowTurnCap(8, 300), FakeMetrics(), clock, item_expiry_seconds=360, rate=10
        )
        limiter = WorkspaceRateLimiter(table, RateLimit(10, 40), FakeMetrics(), clock, slow)
        meter = CapacityMeter(client, side, {"limits": TableSpec(("id",))})
        found: dict[str, float] = {}
        in_flight = []
        for kind in ("fast", "slow", "slowWithSevenInFlight"):
            if kind == "slowWithSevenInFlight":
                for _ in range(7):  # left in flight: the item at its fullest below the cap
                    limiter.admit("ws")
                    in_flight.append(slow.register("ws", slow.new_entry(30)))
            meter.reset()
            limiter.admit("ws")
            if kind != "fast":  # what the watch does at its first second and its end
                slow.release("ws", slow.register("ws", slow.new_entry(30)))
            found[kind] = meter.reset().table_write_units
            clock.advance(0.1)
        for registration in in_flight:
            slow.release("ws", registration)
    return found


def render_slow_tenants(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = [
        [
            "off" if run["cap"] == 0 else str(run["cap"]),
            run["slow"]["answered"],
            run["slow"]["refused"],
            run["fast"]["answered"],
            run["fast"]["refused"],
            f"{run['fast']['medianSeconds'] * 1000:.0f} ms",
            f"{run['fast']['p90Seconds'] * 1000:.0f} ms",
            f"{run['fast']['worstSeconds']:.2f} s",
        ]
        for run in figure["runs"]
    ]
    units = figure["units"]
    return "\n".join(
        [
            title,
            f"tenant slow: {figure['slowClients']} clients, an agent whose tool answers in"
            f" {figure['toolSeconds']:g} s; tenant fast: plain turns, five a second; both for"
            f" {figure['windowSeconds']:g} s through PredictFunction (50 environments),"
            " rate limit 10 a second, 40 at once; 429: turns refused as over a limit (the"
            " client waits Retry-After and tries again); p90: the time 90% of turns beat; the"
            " slow-turn cap: WorkspaceMaxSlowTurns",
            "",
            table(
                [
                    "slow-turn cap",
                    "slow answered",
                    "slow 429",
                    "fast answered",
                    "fast 429",
                    "fast median",
                    "fast p90",
                    "fast worst",
                ],
                rows,
            ),
            f"write units on the limits item: a fast turn {units['fast']:g} (the rate limit's),"
            f" a slow turn {units['slow']:g} ({units['slow'] - units['fast']:g} for the cap),"
            f" {units['slowWithSevenInFlight']:g} with seven others in flight.",
        ]
    )
