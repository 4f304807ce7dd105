"""Summary triggers that survive a queue outage: the in-process stack at its default
summary settings, SummarizeFunction consuming the SummaryQueue in the background, and SQS
sends failing for a while. A trigger counts as sent only once SQS took it, so the first
turn after the outage sends one, and the summary catches up without further turns."""

from __future__ import annotations

import threading
from typing import Any

from botocore.exceptions import EndpointConnectionError

from tests.support.clocks import ShiftedClock
from tests.support.inprocess_api import inprocess_stack, new_workspace
from tests.support.summary_jobs import SummaryJobs
from tests.support.waiting import wait_for

OUTAGE_SECONDS = 4.0
CATCH_UP_SECONDS = 30.0


class SqsOutage:
    """Makes the serving path's SQS sends fail while ``down`` (a connection error)."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.failed_sends = 0
        self.sends = 0

    def __call__(self, **kwargs: Any) -> None:
        self.sends += 1
        if self.down.is_set():
            self.failed_sends += 1
            raise EndpointConnectionError(endpoint_url="https://sqs.us-east-1.amazonaws.com")


def test_after_sqs_sends_fail_for_a_while_the_next_turn_brings_the_summary_up_to_date() -> None:
    # The outage's seconds pass on the container's clock (the trigger's coalescing
    # window reads it), not in real time; SQS delays are still real.
    clock = ShiftedClock()
    with inprocess_stack(clock=clock) as api:  # SUMMARY_COALESCE_SECONDS and _DELAY_SECONDS: 2 each
        _, token = new_workspace(api, "alpha")
        created = api.call(
            "POST",
            "/v1/capabilities",
            token=token,
            json_body={
                "name": "short memory",
                "kind": "generative",
                "replay": {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1},
            },
        )
        session = api.call(
            "POST",
            "/v1/sessions",
            token=token,
            json_body={"capabilityId": created.body["id"], "externalRef": "customer-4471"},
        )
        session_id = session.body["id"]
        outage = SqsOutage()
        api.container.infrastructure.clients["sqs"].meta.events.register(
            "before-call.sqs.SendMessage", outage
        )

        def turn(i: int) -> dict[str, Any]:
            response = api.call(
                "POST",
                f"/v1/sessions/{session_id}/messages",
                token=token,
                json_body={"input": f"turn {i}: my locker code is {4000 + i}"},
            )
            assert response.status == 200 and response.body["recorded"] is True, response.body
            return dict(response.body)

        def view() -> dict[str, Any]:
            return dict(api.call("GET", f"/v1/sessions/{session_id}/context", token=token).body)

        def caught_up() -> dict[str, Any] | None:
            current = view()
            summary = current["summary"]
            ok = summary and summary["throughSeq"] >= current["omittedMessages"]
            return current if ok else None

        with SummaryJobs(api):
            turn(1)
            turn(2)  # one more turn would omit messages: the summary is folded ahead
            wait_for(
                lambda: view()["summary"],
                CATCH_UP_SECONDS,
                "the summary before the outage",
                every=0.1,
            )

            outage.down.set()
            began = clock()
            for i in (3, 4, 5):  # three turns while every send fails, 1.5 s apart
                turn(i)
                if i < 5:
                    clock.advance(1.5)
            clock.advance(max(0.0, OUTAGE_SECONDS - (clock() - began)))
            outage.down.clear()

            # Turns 4 and 5 were due (turn 3 was still covered): both sends failed.
            assert outage.failed_sends == 2
            before = view()
            assert before["summary"]["throughSeq"] < before["omittedMessages"]  # a gap now

            # Right after the outage, within the coalescing window of turn 5's attempt:
            # a failed send did not count as sent, so this turn sends. Then no more turns.
            turn(6)

            after = wait_for(caught_up, CATCH_UP_SECONDS, "the summary to catch up", every=0.1)

        assert after["omittedMessages"] == 8
        assert after["summary"]["throughSeq"] >= 8
        for code in range(4001, 4005):  # the outage's messages are folded too
            assert str(code) in after["summary"]["text"]
