"""Figure 19: the app's own tools (v4), one turn of each kind, on the in-process stack
(moto, the real handlers, warm containers, the embedded model, which calls an offered
tool whose name occurs in the input).

Turns of sessions whose replay window is full (the same state read), through the
OpenAI-compatible door by the app's session key: a plain turn; a turn offered the app's
tools that calls none; a turn that pauses for one; and its continuation with the tool's
result. Measured: the DynamoDB requests and capacity units of each (``bench.capacity``,
every table: the conversations table, and the runs table where a trace is written).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
WARM_TURNS = 12  # past the default window (20 messages): every turn then reads the same
ROWS = (
    ("plain", "a turn (no tools)"),
    ("offered", "a turn offered the app's tools, none called"),
    ("pause", "a turn that pauses for the app's tool"),
    ("continuation", "its continuation with the tool's result"),
)


def app_tools_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from tests.support.chat_door import WEATHER_TOOL
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    progress("the app's own tools: a plain turn, one offered tools, a pause, its continuation")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-app-tools")

        def chat(key: str, messages: list[dict[str, Any]], tools: bool) -> Any:
            body: dict[str, Any] = {"model": CAP, "messages": messages, "user": "bench-app"}
            if tools:
                body["tools"] = [WEATHER_TOOL]
            response = api.call(
                "POST",
                "/v1/chat/completions",
                token=token,
                json_body=body,
                headers={"X-Convo-Session-Key": key},
            )
            if response.status != 200:
                raise RuntimeError(f"chat completion failed: {response.status} {response.body}")
            return response.body

        for key in ("plain", "offered", "pause"):
            for index in range(WARM_TURNS):
                chat(key, [{"role": "user", "content": f"warm-up turn {index:02d}"}], False)
        side = boto3.client("dynamodb", region_name="us-east-1")
        meter = CapacityMeter(
            api.container.infrastructure.clients["dynamodb"],
            side,
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )
        units: dict[str, dict[str, Any]] = {}
        ask = [{"role": "user", "content": "What does get_weather say about Paris?"}]
        for name, messages, tools in (
            ("plain", [{"role": "user", "content": "measured turn 00"}], False),
            ("offered", [{"role": "user", "content": "measured turn 00"}], True),
            ("pause", ask, True),
        ):
            meter.reset()
            paused = chat(name, messages, tools)
            units[name] = meter.reset().to_dict()
        [call] = paused["choices"][0]["message"]["tool_calls"]
        resent: list[dict[str, Any]] = [
            *ask,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 24C"},
        ]
        chat("pause", resent, True)
        units["continuation"] = meter.reset().to_dict()
    return _figure(units)


def _figure(units: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [
        {
            "turn": name,
            "label": label,
            "requests": units[name]["requests"],
            "readUnits": units[name]["readUnits"],
            "writeUnits": units[name]["tableWriteUnits"] + units[name]["indexWriteUnits"],
        }
        for name, label in ROWS
    ]
    by = {row["turn"]: row for row in rows}

    def puts(row: dict[str, Any]) -> int:
        return int(row["requests"].get("PutItem", 0))

    plain = by["plain"]
    return {
        "rows": rows,
        "offeredCostsAsPlain": (by["offered"]["requests"], by["offered"]["readUnits"])
        == (plain["requests"], plain["readUnits"])
        and by["offered"]["writeUnits"] == plain["writeUnits"],
        # What pausing adds to the turn: the puts of the pause and its continuation, next
        # to a plain turn's and the digest and run trace any turn that used a tool writes.
        # (Each of the two requests is also admitted by the rate limit: its UpdateItem.)
        "pauseExtraWrites": puts(by["pause"]) + puts(by["continuation"]) - puts(plain) - 2,
    }


def render_app_tools(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    rows = [
        [
            r["label"],
            ", ".join(f"{op} {n}" for op, n in sorted(r["requests"].items())),
            f"{r['readUnits']:g}",
            f"{r['writeUnits']:g}",
        ]
        for r in figure["rows"]
    ]
    same = "the same as" if figure["offeredCostsAsPlain"] else "NOT the same as"
    return "\n".join(
        [
            title,
            "one warm turn of a session with a full replay window, through the "
            "OpenAI-compatible door (by the app's key), every table",
            "",
            table(["turn", "DynamoDB requests", "RRU", "WRU"], rows),
            f"a turn offered the app's tools costs {same} a plain turn; a paused turn's "
            f"PutItems beyond a plain turn's, its digest and run trace apart: "
            f"{figure['pauseExtraWrites']} (the pause kept at its position, in the "
            "byActivity index while it waits); each request is admitted by the rate "
            "limit (UpdateItem)",
        ]
    )
