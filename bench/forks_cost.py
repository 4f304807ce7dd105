"""Figure 18: what a fork costs. Creating a fork (``POST /v1/sessions/{id}/forks``) of
a 10-message and of a 1,000-message session, next to opening a session: the handler's
time (median of several) and DynamoDB requests and capacity units (``bench.capacity``, a
transaction's items doubled); the copy job that makes the older inherited messages the
fork's own; and a warm turn on the fork next to a turn on a plain session of the same
1,000 messages.

On the in-process stack (moto, the real handlers and worker), the seeded generative
capability (replay 20 messages), histories written as turns write them (messages of 120
characters).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAP = "cap-generative"
LONG, SHORT = 1_000, 10
FORKS_TIMED = 5


def forks_figure(
    progress: Callable[[str], None], timed: int = FORKS_TIMED, long: int = LONG
) -> dict[str, Any]:
    """Figure 18 (see the module docstring); ``timed``: the runs each time is the median
    of; ``long``: the long parent's messages."""
    from tests.support.inprocess_api import inprocess_stack, new_workspace

    progress("forks: creating them, their copy job, a turn on one")
    with inprocess_stack() as api:
        _, token = new_workspace(api, "bench-forks")
        bench = _ForkBench(api, token, long)
        # Timed first, with nothing hooked into the client; then counted.
        times = {case: bench.median_ms(step, timed) for case, step in bench.steps().items()}
        copy_ms = bench.timed_copy()
        meter = bench.meter()
        creating = []
        for case, step in bench.steps().items():
            meter.reset()
            step()
            creating.append({"case": case, "ms": times[case]} | meter.reset().to_dict())
        fork_id = bench.fork(long)
        meter.reset()
        bench.copy(fork_id)
        copy = {"case": f"copy the rest of a fork of {long:,} messages", "ms": copy_ms}
        copy |= meter.reset().to_dict()
        turns = []
        bench.say(fork_id, "warm-up")
        for label, session_id in (("plain session", bench.plain), ("fork", fork_id)):
            meter.reset()
            bench.say(session_id, "And the other one?")
            turns.append({"session": label} | meter.reset().to_dict())
    return {"messages": long, "creating": creating, "copy": copy, "turns": turns}


class _ForkBench:
    """The figure's sessions and calls on one in-process stack."""

    def __init__(self, api: Any, token: str, long: int) -> None:
        self.api, self.token, self.long = api, token, long
        self.plain = self.session(long)
        self.parents = {SHORT: self.session(SHORT), long: self.session(long)}
        self.say(self.plain, "warm-up")

    def call(self, method: str, path: str, body: dict[str, Any], status: int) -> Any:
        response = self.api.call(method, path, token=self.token, json_body=body)
        if response.status != status:
            raise RuntimeError(f"{method} {path}: {response.status} {response.body}")
        return response.body

    def session(self, messages: int) -> str:
        from tests.support.inprocess_api import seed_history

        body = {"capabilityId": CAP, "externalRef": "bench-forks-user"}
        session_id = str(self.call("POST", "/v1/sessions", body, 201)["id"])
        seed_history(self.api, session_id, messages)
        return session_id

    def fork(self, messages: int) -> str:
        path = f"/v1/sessions/{self.parents[messages]}/forks"
        return str(self.call("POST", path, {"atSeq": messages}, 201)["id"])

    def say(self, session_id: str, text: str) -> None:
        self.call("POST", f"/v1/sessions/{session_id}/messages", {"input": text}, 200)

    def steps(self) -> dict[str, Callable[[], Any]]:
        return {
            "open a session": lambda: self.session(0),
            **{
                f"fork a {n:,}-message session at its last answer": partial(self.fork, n)
                for n in (SHORT, self.long)
            },
        }

    def median_ms(self, step: Callable[[], Any], runs: int) -> float:
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            step()
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times)

    def copy(self, fork_id: str) -> None:
        from convo_memory.domain.jobs import ForkCopyJob

        job = ForkCopyJob(workspace_id="-", parent_id=self.parents[self.long], fork_id=fork_id)
        self.api.container.forks.copy(job)

    def timed_copy(self) -> float:
        fork_id = self.fork(self.long)
        began = time.perf_counter()
        self.copy(fork_id)
        return (time.perf_counter() - began) * 1000

    def meter(self) -> Any:
        import boto3

        from bench.capacity import CapacityMeter, table_specs

        return CapacityMeter(
            self.api.container.infrastructure.clients["dynamodb"],
            boto3.client("dynamodb", region_name="us-east-1"),
            table_specs(ROOT / "template.yaml", self.api.resources.tables),
        )


def render_forks(figure: dict[str, Any], table: Any, title: str) -> str:
    """The figure as text (``table``: ``bench.stats.table``)."""
    from bench.stats import capacity_cells as units
    from bench.stats import num, ops_text

    creating = [[r["case"], num(r["ms"], 1), *units(r)] for r in figure["creating"]]
    copy = figure["copy"]
    turns = [[r["session"], *units(r)] for r in figure["turns"]]
    same = len({(ops_text(r["requests"]), r["readUnits"]) for r in figure["turns"]}) == 1
    return "\n".join(
        [
            title,
            "warm, in process (moto); time: the handler's, median of 5; units as in figure 2",
            table(["creating", "ms", "requests", "RRU", "WRU", "units"], creating),
            "",
            table(
                ["the fork's copy job", "ms", "requests", "RRU", "WRU", "units"],
                [[copy["case"], num(copy["ms"], 1), *units(copy)]],
            ),
            "",
            table(
                [
                    f"a warm turn, {figure['messages']:,} messages",
                    "requests",
                    "RRU",
                    "WRU",
                    "units",
                ],
                turns,
            ),
            "a turn on a fork: "
            + (
                "the same requests and read units as on a plain session" if same else "NOT the same"
            ),
        ]
    )
