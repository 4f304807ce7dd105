"""Figure 13: what recall costs. Opening a session on a capability with ``recall:
{sessions: 5}`` (DynamoDB requests and capacity units, ``bench.capacity``), next to
opening one without recall, and the turns of such a session next to a turn without one.

On the in-process stack (moto, the real handlers), warm: one end user with five earlier
sessions of 20 messages of 120 characters each (history written as turns write it),
three of them with a rolling summary of 2,000 characters (the default size); sessions
are opened through ``POST /v1/sessions`` and turns go through predict.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EARLIER_SESSIONS = 5
EARLIER_MESSAGES = 20
SUMMARY_CHARS = 2_000
END_USER = "bench-recall-user"


def recall_cost_figure(progress: Callable[[str], None]) -> dict[str, Any]:
    """Figure 13 (see the module docstring)."""
    import boto3

    from bench.capacity import CapacityMeter, table_specs
    from convo_memory.domain.models import Summary
    from tests.support.inprocess_api import inprocess_stack, new_workspace, seed_history

    progress("opening a session with recall, and its turns")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-recall")

        def call(method: str, path: str, body: dict[str, Any], status: int) -> Any:
            response = api.call(method, path, token=token, json_body=body)
            if response.status != status:
                raise RuntimeError(f"{method} {path}: {response.status} {response.body}")
            return response.body

        def capability(name: str, recall: dict[str, Any] | None) -> str:
            body: dict[str, Any] = {"name": name, "kind": "generative"}
            if recall is not None:
                body["recall"] = recall
            cap = str(call("POST", "/v1/capabilities", body, 201)["id"])
            open_session(cap, "bench-warm-up")  # the capability is cached from now on
            return cap

        def open_session(cap: str, ref: str = END_USER) -> str:
            body = {"capabilityId": cap, "externalRef": ref}
            return str(call("POST", "/v1/sessions", body, 201)["id"])

        def context(session_id: str) -> Any:
            response = api.call("GET", f"/v1/sessions/{session_id}/context", token=token)
            return response.body

        def earlier_sessions(cap: str) -> None:
            for index in range(EARLIER_SESSIONS):
                session_id = open_session(cap)
                seed_history(api, session_id, EARLIER_MESSAGES)
                if index % 2 == 0:
                    summary = Summary(text="s" * SUMMARY_CHARS, through_seq=EARLIER_MESSAGES - 4)
                    assert api.container.adapters.stores.summaries.advance_summary(
                        session_id, 0, summary
                    )

        plain = capability("bench no recall", None)
        recalls = {
            "{sessions: 5}": capability("bench recall", {"sessions": 5}),
            "{sessions: 5, maxChars: 8000}": capability(
                "bench recall 8000", {"sessions": 5, "maxChars": 8_000}
            ),
        }
        for cap in recalls.values():
            earlier_sessions(cap)
        meter = CapacityMeter(
            api.container.infrastructure.clients["dynamodb"],
            boto3.client("dynamodb", region_name="us-east-1"),
            table_specs(ROOT / "template.yaml", api.resources.tables),
        )

        opening: list[dict[str, Any]] = []
        sessions: dict[str, str] = {}

        def measure_opening(label: str, cap: str, ref: str = END_USER) -> str:
            meter.reset()
            session_id = open_session(cap, ref)
            units = meter.reset()
            recall = context(session_id)["recall"]
            opening.append(
                {
                    "case": label,
                    "recalledSessions": len(recall["fromSessions"]) if recall else 0,
                    "recallChars": len(recall["text"]) if recall else 0,
                }
                | units.to_dict()
            )
            return session_id

        sessions["none"] = measure_opening("no recall", plain)
        measure_opening("recall {sessions: 5}, nothing earlier", recalls["{sessions: 5}"], "new")
        for label, cap in recalls.items():
            sessions[label] = measure_opening(f"recall {label}, 5 earlier sessions", cap)

        turns: list[dict[str, Any]] = []
        predict = "/v1/capabilities/{cap}/predict"
        caps = {"none": plain, **recalls}
        for label, session_id in sessions.items():
            seed_history(api, session_id, EARLIER_MESSAGES)
            path = predict.format(cap=caps[label])
            call("POST", path, {"input": "warm-up", "sessionId": session_id}, 200)
            meter.reset()
            call(
                "POST",
                path,
                {"input": "And what about the other one?", "sessionId": session_id},
                200,
            )
            units = meter.reset()
            recall = context(session_id)["recall"]
            turns.append(
                {"session": "no recall" if label == "none" else f"recall {label}"}
                | {"recallChars": len(recall["text"]) if recall else 0}
                | units.to_dict()
            )
    return {
        "earlierSessions": EARLIER_SESSIONS,
        "earlierMessages": EARLIER_MESSAGES,
        "summaryChars": SUMMARY_CHARS,
        "opening": opening,
        "turns": turns,
    }


def render_recall_cost(figure: dict[str, Any], table: Any, title: str) -> str:
    """The figure as text (``table``: ``bench.stats.table``)."""
    from bench.stats import capacity_cells, num, ops_text

    def units(row: dict[str, Any]) -> list[str]:
        return [*capacity_cells(row), f"${row['dollarsPerMillion']:.2f}"]

    opening = [
        [r["case"], r["recalledSessions"], num(r["recallChars"]), *units(r)]
        for r in figure["opening"]
    ]
    turns = [[r["session"], num(r["recallChars"]), *units(r)] for r in figure["turns"]]
    same = len({ops_text(r["requests"]) for r in figure["turns"]}) == 1
    return "\n".join(
        [
            title,
            f"one end user with {figure['earlierSessions']} earlier sessions of"
            f" {figure['earlierMessages']} messages (120 characters), 3 of them summarized"
            f" ({figure['summaryChars']:,} characters); warm; units as in figure 2 (a"
            " transaction's items doubled)",
            table(
                [
                    "opening a session",
                    "recalled",
                    "chars",
                    "requests",
                    "RRU",
                    "WRU",
                    "units",
                    "per M sessions",
                ],
                opening,
            ),
            "",
            table(
                [
                    "a warm turn on a session",
                    "recall chars",
                    "requests",
                    "RRU",
                    "WRU",
                    "units",
                    "per M turns",
                ],
                turns,
            ),
            "requests per turn: "
            + ("the same with and without recall" if same else "NOT the same (see above)")
            + "; the recall is read with the head, in the turn's one Query, so only its"
            " bytes count (read units per 4 KB of the Query)",
        ]
    )
