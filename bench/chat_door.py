"""Figure 14: a turn through the OpenAI-compatible door next to the same turn through
predict, on the in-process stack (moto, the real handlers, warm containers).

Both are turns of a session whose replay window is full (the same state read, the same
turn written): predict by ``sessionId``, the door by the app's own key
(``X-Convo-Session-Key``, the container remembering the key's session). Measured as
``bench.doors`` says: the DynamoDB requests and capacity units of one turn, and the
PredictFunction handler's time, turns of the two doors interleaved, medians compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.doors import CAP, TimedTurns, call, compare_doors, predict_door, render_doors

LABELS = {
    "predict": "POST /v1/capabilities/{id}/predict (sessionId)",
    "chat": "POST /v1/chat/completions (X-Convo-Session-Key)",
}


def chat_door_figure(turns: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    progress(f"the OpenAI-compatible door next to predict ({turns} turns each)")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-door")
        clock = TimedTurns(api)

        def chat(text: str) -> float:
            body = {
                "model": CAP,
                "messages": [{"role": "user", "content": text}],
                "user": "bench-door",
            }
            headers = {"X-Convo-Session-Key": "bench-door-conversation"}
            call(api, token, "/v1/chat/completions", body, headers)
            return clock.last

        doors = {"predict": predict_door(api, token, clock), "chat": chat}
        return compare_doors(api, doors, LABELS, turns)


def render_chat_door(figure: dict[str, Any], table: Callable[..., str], title: str) -> str:
    setting = "one warm turn of a session with a full replay window"
    return render_doors(figure, table, title, setting)
