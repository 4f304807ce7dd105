"""Figure 20: a turn through the Responses door (v4) next to the same turn through
predict, on the in-process stack (moto, the real handlers, warm containers).

Four sessions whose replay windows are full (the same state read, the same turn
written): predict's by ``sessionId``; a chain of responses, each naming the one before as
``previous_response_id`` (the first opened its conversation); a conversation opened
by ``POST /v1/conversations``, each response naming it as ``conversation``; and (v5) a
conversation that an app's resent history names (the previous answer's item, with the id
the service gave it, before the new input), as SDKs do by default. Measured as
``bench.doors`` says: the DynamoDB requests and capacity units of one turn, and the
PredictFunction handler's time, the three doors' turns interleaved, medians compared.

Beside them, what the door's other calls cost, once each: reading a stored response
(``GET /v1/responses/{id}``, one BatchGetItem), what it was sent (``.../input_items``),
a response after an older one (which opens a fork at its answer), and deleting a
response.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.doors import (
    CAP,
    WARM_TURNS,
    TimedTurns,
    call,
    capacity_meter,
    compare_doors,
    predict_door,
    render_doors,
)

RESPONSES = "/v1/responses"
END_USER = "bench-responses"
LABELS = {
    "predict": "POST /v1/capabilities/{id}/predict (sessionId)",
    "previous": "POST /v1/responses (previous_response_id: the newest)",
    "conversation": "POST /v1/responses (conversation)",
    "items": "POST /v1/responses (resent items name it)",
}


class _Chain:
    """Responses each after the one before: the door an app that chains by
    ``previous_response_id`` uses (its first response opens the conversation)."""

    def __init__(self, api: Any, token: str, clock: TimedTurns) -> None:
        self.api, self.token, self.clock = api, token, clock
        self.ids: list[str] = []

    def turn(self, text: str) -> float:
        body: dict[str, Any] = {"model": CAP, "input": text, "user": END_USER}
        if self.ids:
            body["previous_response_id"] = self.ids[-1]
        self.ids.append(str(call(self.api, self.token, RESPONSES, body)["id"]))
        return self.clock.last


class _ResentItems:
    """(v5) Responses that name nothing but resend the previous answer's item (its id the
    service's) before the new input: the door an app that keeps its history uses."""

    def __init__(self, api: Any, token: str, clock: TimedTurns) -> None:
        self.api, self.token, self.clock = api, token, clock
        self.last: list[dict[str, Any]] = []

    def turn(self, text: str) -> float:
        said = {"role": "user", "content": text}
        body = {"model": CAP, "input": [*self.last, said], "user": END_USER}
        self.last = list(call(self.api, self.token, RESPONSES, body)["output"])
        return self.clock.last


def _conversation_door(api: Any, token: str, clock: TimedTurns) -> Callable[[str], float]:
    """Responses in a conversation opened by ``POST /v1/conversations`` (its first
    response binds it)."""
    conversation = str(call(api, token, "/v1/conversations", {"metadata": {}})["id"])

    def turn(text: str) -> float:
        body = {"model": CAP, "input": text, "user": END_USER, "conversation": conversation}
        call(api, token, RESPONSES, body)
        return clock.last

    return turn


def responses_door_figure(
    turns: int, progress: Callable[[str], None], warm_turns: int = WARM_TURNS
) -> dict[str, Any]:
    """Figure 20 (see the module docstring); ``turns``: the timed turns of each door."""
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    progress(f"the Responses door next to predict ({turns} turns each)")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-responses")
        clock = TimedTurns(api)
        chain = _Chain(api, token, clock)
        doors = {
            "predict": predict_door(api, token, clock),
            "previous": chain.turn,
            "conversation": _conversation_door(api, token, clock),
            "items": _ResentItems(api, token, clock).turn,
        }
        figure = compare_doors(api, doors, LABELS, turns, warm_turns)
        figure["stored"] = _stored_calls(api, token, chain)
    return figure


def _stored_calls(api: Any, token: str, chain: _Chain) -> list[dict[str, Any]]:
    """What the door's other calls cost, each once, on the chain's conversation."""
    newest, older = chain.ids[-1], chain.ids[-3]
    path = f"{RESPONSES}/{newest}"
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("GET /v1/responses/{id}", lambda: call(api, token, path, method="GET")),
        (
            "GET /v1/responses/{id}/input_items",
            lambda: call(api, token, f"{path}/input_items", method="GET"),
        ),
        (
            "POST /v1/responses after an older response (a fork at its answer)",
            lambda: call(
                api,
                token,
                RESPONSES,
                {
                    "model": CAP,
                    "input": "measured turn 0 of the same length",
                    "user": END_USER,
                    "previous_response_id": older,
                },
            ),
        ),
        ("DELETE /v1/responses/{id}", lambda: call(api, token, path, method="DELETE")),
    ]
    meter = capacity_meter(api)
    rows = []
    for label, step in steps:
        meter.reset()
        step()
        rows.append({"call": label} | meter.reset().to_dict())
    return rows


def render_responses_door(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    """The figure as text (``table``: ``bench.stats.table``)."""
    from bench.stats import capacity_cells

    setting = "one warm turn of a session with a full replay window, every table"
    parts = [render_doors(figure, table, title, setting)]
    stored = figure.get("stored")
    if stored:
        rows = [[row["call"], *capacity_cells(row)] for row in stored]
        parts += ["", table(["the door's other calls", "requests", "RRU", "WRU", "units"], rows)]
    return "\n".join(parts)
