"""Turns through several doors next to the same turns through predict, on one
in-process stack (moto, the real handlers, warm containers): figures 14 and 20.

Each door has its own session, warmed past the default replay window (20 messages) so
that every turn reads and writes the same. Measured per door: the DynamoDB requests and
capacity units of one turn (``bench.capacity``, every table), three times (they must
agree); and PredictFunction's handler time (its invocation, without the authorizer),
the doors' turns interleaved (their order reversed every other round), medians
compared with predict's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.stats import median

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
WARM_TURNS = 12  # past the default window (20 messages): every turn then reads the same
METERED_TURNS = 3
ALLOWED_EXTRA = 0.05
PREDICT = "predict"

# One turn through a door: its input text in, the handler's seconds out.
DoorTurn = Callable[[str], float]


class TimedTurns:
    """PredictFunction's handler time of each call made through ``api``: the doors'
    turns all run in it, so the time compared is the handler's own, no gateway's."""

    def __init__(self, api: Any) -> None:
        self.seconds: list[float] = []
        invoke = api.invoke

        def timed(function: str, event: dict[str, Any]) -> Any:
            began = time.perf_counter()
            try:
                return invoke(function, event)
            finally:
                if function == "PredictFunction":
                    self.seconds.append(time.perf_counter() - began)

        api.invoke = timed

    @property
    def last(self) -> float:
        return self.seconds[-1]


def call(
    api: Any,
    token: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> Any:
    """One call that must answer 200: its body."""
    response = api.call(method, path, token=token, json_body=body, headers=headers)
    if response.status != 200:
        raise RuntimeError(f"{method} {path} failed: {response.status} {response.body}")
    return response.body


def predict_door(api: Any, token: str, clock: TimedTurns) -> DoorTurn:
    """predict by ``sessionId`` on a session of its own."""
    opened = api.call(
        "POST",
        "/v1/sessions",
        token=token,
        json_body={"capabilityId": CAP, "externalRef": "bench-predict"},
    )
    session_id = opened.body["id"]

    def turn(text: str) -> float:
        body = {"input": text, "sessionId": session_id}
        call(api, token, f"/v1/capabilities/{CAP}/predict", body)
        return clock.last

    return turn


def capacity_meter(api: Any) -> Any:
    """A ``bench.capacity.CapacityMeter`` on the stack's DynamoDB client (from now on)."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs

    return CapacityMeter(
        api.container.infrastructure.clients["dynamodb"],
        boto3.client("dynamodb", region_name="us-east-1"),
        table_specs(ROOT / "template.yaml", api.resources.tables),
    )


def detach(api: Any, meter: Any) -> None:
    """Stop ``meter`` counting (its own reads would slow the turns timed next)."""
    events = api.container.infrastructure.clients["dynamodb"].meta.events
    events.unregister("provide-client-params.dynamodb", meter._before)
    events.unregister("after-call.dynamodb", meter._after)


def compare_doors(
    api: Any,
    doors: Mapping[str, DoorTurn],
    labels: Mapping[str, str],
    turns: int,
    warm_turns: int = WARM_TURNS,
) -> dict[str, Any]:
    """The figure of ``doors`` (predict's first): each door's requests, units and
    median handler time, and against predict whether they are the same and how much
    time it adds."""
    for index in range(warm_turns):
        for turn in doors.values():
            turn(f"warm-up turn {index:02d} of the same length")
    meter = capacity_meter(api)
    units: dict[str, list[dict[str, Any]]] = {name: [] for name in doors}
    for index in range(METERED_TURNS):
        for name, turn in doors.items():
            meter.reset()
            turn(f"measured turn {index} of the same length")
            units[name].append(meter.reset().to_dict())
    # The meter's reads of the items it prices are not the turn's: time without it.
    detach(api, meter)
    seconds: dict[str, list[float]] = {name: [] for name in doors}
    for index in range(turns):
        order = list(doors.items())
        if index % 2:
            order.reverse()  # no door always runs first
        for name, turn in order:
            seconds[name].append(turn(f"timed turn {index:04d} of the same length"))
    return door_figure(units, seconds, labels, turns)


def door_figure(
    units: Mapping[str, list[dict[str, Any]]],
    seconds: Mapping[str, list[float]],
    labels: Mapping[str, str],
    turns: int,
) -> dict[str, Any]:
    """The figure from what was measured (pure): a row per door, each door other than
    predict compared with it."""
    rows = []
    for name, label in labels.items():
        sample = units[name][-1]
        rows.append(
            {
                "door": name,
                "label": label,
                "requests": sample["requests"],
                "readUnits": sample["readUnits"],
                "writeUnits": sample["tableWriteUnits"] + sample["indexWriteUnits"],
                "consistent": all(u == sample for u in units[name]),
                "handlerMs": median(seconds[name]) * 1000,
            }
        )
    base = next(row for row in rows if row["door"] == PREDICT)
    for row in rows:
        if row is base:
            continue
        added = row["handlerMs"] / base["handlerMs"] - 1
        row["sameRequests"] = row["requests"] == base["requests"]
        row["sameUnits"] = (row["readUnits"], row["writeUnits"]) == (
            base["readUnits"],
            base["writeUnits"],
        )
        row["addedHandlerTime"] = added
        row["withinBound"] = added <= ALLOWED_EXTRA
    others = [row for row in rows if row is not base]
    return {
        "turns": turns,
        "rows": rows,
        "sameRequests": all(row["sameRequests"] for row in others),
        "sameUnits": all(row["sameUnits"] for row in others),
        "withinBound": all(row["withinBound"] for row in others),
        "addedHandlerTime": max(row["addedHandlerTime"] for row in others),
    }


def render_doors(
    figure: Mapping[str, Any], table: Callable[..., str], title: str, setting: str
) -> str:
    """The figure as text: its rows, then each door's verdict against predict."""
    rows = [
        [
            r["label"],
            ", ".join(f"{op} {n}" for op, n in sorted(r["requests"].items())),
            f"{r['readUnits']:g}",
            f"{r['writeUnits']:g}",
            f"{r['handlerMs']:.2f}",
        ]
        for r in figure["rows"]
    ]
    lines = [
        title,
        f"{setting}; handler time: median of {figure['turns']} interleaved turns each"
        " (PredictFunction, without the authorizer)",
        "",
        table(["door", "DynamoDB requests", "RRU", "WRU", "handler ms"], rows),
    ]
    for r in figure["rows"]:
        if r["door"] == PREDICT:
            continue
        same = "equal" if r["sameRequests"] and r["sameUnits"] else "NOT equal"
        bound = "within" if r["withinBound"] else "OVER"
        lines.append(
            f"{r['door']}: DynamoDB requests and units {same} to predict's; added handler"
            f" time {r['addedHandlerTime']:+.1%} ({bound} the 5% bound)"
        )
    if not all(r["consistent"] for r in figure["rows"]):
        lines.append("(the metered turns of a door did NOT all cost the same)")
    return "\n".join(lines)
