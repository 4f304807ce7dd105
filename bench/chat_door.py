"""Figure 14: a turn through the OpenAI-compatible door next to the same turn through
predict, on the in-process stack (moto, the real handlers, warm containers).

Both are turns of a session whose replay window is full (the same state read, the same
turn written): predict by ``sessionId``, the door by the app's own key
(``X-Convo-Session-Key``, the container remembering the key's session). Measured: the
DynamoDB requests and capacity units of one turn (``bench.capacity``), and the
PredictFunction handler's time (its invocation, without the authorizer), turns of the
two doors interleaved, medians compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import median

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
WARM_TURNS = 12  # past the default window (20 messages): every turn then reads the same
ALLOWED_EXTRA = 0.05


def chat_door_figure(turns: int, progress: Callable[[str], None]) -> dict[str, Any]:
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    progress(f"the OpenAI-compatible door next to predict ({turns} turns each)")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-door")
        opened = api.call(
            "POST",
            "/v1/sessions",
            token=token,
            json_body={"capabilityId": CAP, "externalRef": "bench-predict"},
        )
        session_id = opened.body["id"]
        handler_seconds: list[float] = []
        invoke = api.invoke

        def timed(function: str, event: dict[str, Any]) -> Any:
            began = time.perf_counter()
            try:
                return invoke(function, event)
            finally:
                if function == "PredictFunction":
                    handler_seconds.append(time.perf_counter() - began)

        api.invoke = timed  # type: ignore[method-assign]

        def predict(text: str) -> float:
            body = {"input": text, "sessionId": session_id}
            response = api.call(
                "POST", f"/v1/capabilities/{CAP}/predict", token=token, json_body=body
            )
            if response.status != 200:
                raise RuntimeError(f"predict failed: {response.status} {response.body}")
            return handler_seconds[-1]

        def door(text: str) -> float:
            body = {
                "model": CAP,
                "messages": [{"role": "user", "content": text}],
                "user": "bench-door",
            }
            response = api.call(
                "POST",
                "/v1/chat/completions",
                token=token,
                json_body=body,
                headers={"X-Convo-Session-Key": "bench-door-conversation"},
            )
            if response.status != 200:
                raise RuntimeError(f"chat completion failed: {response.status} {response.body}")
            return handler_seconds[-1]

        doors = {"predict": predict, "chat": door}
        for index in range(WARM_TURNS):
            for turn in doors.values():
                turn(f"warm-up turn {index} of the same length")

        side = boto3.client("dynamodb", region_name="us-east-1")
        meter = CapacityMeter(
            api.container.adapters.clients["dynamodb"],
            side,
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )
        units: dict[str, list[dict[str, Any]]] = {name: [] for name in doors}
        for index in range(3):
            for name, turn in doors.items():
                meter.reset()
                turn(f"measured turn {index} of the same length")
                units[name].append(meter.reset().to_dict())
        # The meter's reads of the items it prices are not the turn's: time without it.
        meter_off = api.container.adapters.clients["dynamodb"].meta.events
        meter_off.unregister("provide-client-params.dynamodb", meter._before)
        meter_off.unregister("after-call.dynamodb", meter._after)
        seconds: dict[str, list[float]] = {name: [] for name in doors}
        for index in range(turns):
            order = list(doors.items())
            if index % 2:
                order.reverse()  # neither door always runs first
            for name, turn in order:
                seconds[name].append(turn(f"timed turn {index:04d} of the same length"))

    rows = []
    for name, label in (
        ("predict", "POST /v1/capabilities/{id}/predict (sessionId)"),
        ("chat", "POST /v1/chat/completions (X-Convo-Session-Key)"),
    ):
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
    predict_row, chat_row = rows
    added = chat_row["handlerMs"] / predict_row["handlerMs"] - 1
    return {
        "turns": turns,
        "rows": rows,
        "sameRequests": predict_row["requests"] == chat_row["requests"],
        "sameUnits": (predict_row["readUnits"], predict_row["writeUnits"])
        == (chat_row["readUnits"], chat_row["writeUnits"]),
        "addedHandlerTime": added,
        "withinBound": added <= ALLOWED_EXTRA,
    }


def render_chat_door(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
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
    same = "equal" if figure["sameRequests"] and figure["sameUnits"] else "NOT equal"
    bound = "within" if figure["withinBound"] else "OVER"
    return "\n".join(
        [
            title,
            f"one warm turn of a session with a full replay window; handler time: median of"
            f" {figure['turns']} interleaved turns each (PredictFunction, without the authorizer)",
            "",
            table(["door", "DynamoDB requests", "RCU", "WCU", "handler ms"], rows),
            f"DynamoDB requests and units: {same}; the door's added handler time:"
            f" {figure['addedHandlerTime']:+.1%} ({bound} the 5% bound)",
        ]
    )
