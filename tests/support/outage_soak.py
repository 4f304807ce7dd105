"""A soak through an outage of DynamoDB and SQS together, on the in-process stack,
driven by one fake clock (nothing sleeps, nothing waits on real time).

For a while, each transcript write (a turn's PutItem) and each SQS SendMessage fails at
random with probability ``fault_rate``; then the faults stop. Meanwhile turns arrive at a
steady pace over a few sessions, and every simulated second the test drives what AWS
would run by itself: the RepairQueue's event source mapping (receive, invoke
RepairFunction, delete what succeeded; a failed record comes back when its visibility,
which the worker shortens, runs out) and Lambda's queue of asynchronous invocations
(``local_runtime.async_events``, reached through the functions' own boto3 Lambda client).
moto's SQS reads the same clock, so visibility timeouts and receive counts are real.

The result says how many answered turns are in no transcript (lost), how many are in one
twice (duplicated), and how long after the faults stopped every repair path was empty.
Used by ``tests/integration/test_outage_soak.py`` and ``make bench``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from local_runtime.async_events import AsyncEvents, async_invoke_configs
from local_runtime.aws_resources import DEFAULT_TEMPLATE, load_template
from local_runtime.queue_pollers import delete_records, sqs_event, succeeded_records
from tests.fakes.adapters import FakeClock, FakeMetrics
from tests.support.faults import dynamodb_error, is_turn_put
from tests.support.inprocess_api import REGION, InProcessApi, inprocess_stack, new_workspace

TURN_SPACING_SECONDS = 0.25
DRIVE_EVERY_SECONDS = 1.0
SETTLE_LIMIT_SECONDS = 600.0


@dataclass(frozen=True)
class SoakResult:
    fault_rate: float
    turns: int
    answered: int
    lost: int
    duplicated: int
    # Seconds from the faults' end until RepairQueue and Lambda's event queue were both
    # empty (None: not within SETTLE_LIMIT_SECONDS).
    settled_after_seconds: float | None
    faults_injected: int
    unrecorded_answers: int
    queued_repairs: int
    invoked_repairs: int
    counted_lost: int
    in_dead_letter_queue: int

    @property
    def lost_share(self) -> float:
        return self.lost / self.answered if self.answered else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "lostShare": self.lost_share}


@contextmanager
def moto_sqs_clock(clock: Callable[[], float]) -> Iterator[None]:
    """moto's SQS (visibility timeouts, delays, receive counts) on ``clock``."""
    import moto.sqs.models as sqs_models

    saved = (sqs_models.unix_time, sqs_models.unix_time_millis)
    sqs_models.unix_time = lambda *_: clock()
    sqs_models.unix_time_millis = lambda *_: clock() * 1000
    try:
        yield
    finally:
        sqs_models.unix_time, sqs_models.unix_time_millis = saved


class Outage:
    """Random failures of transcript writes and SQS sends while ``on``."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.on = False
        self.injected = 0
        self._random = random.Random(seed)

    def _strikes(self) -> bool:
        strikes = self.on and self._random.random() < self.rate
        self.injected += strikes
        return strikes

    def attach(self, dynamodb: Any, sqs: Any) -> None:
        def turn_write(params: dict[str, Any], **_: Any) -> Any:
            if not is_turn_put(params) or not self._strikes():
                return None
            code = self._random.choice(["ThrottlingException", "InternalServerError"])
            return dynamodb_error(code, 400 if code == "ThrottlingException" else 500)

        def send(**_: Any) -> Any:
            if not self._strikes():
                return None
            parsed = {
                "Error": {"Code": "ServiceUnavailable", "Message": "injected"},
                "ResponseMetadata": {"HTTPStatusCode": 503},
            }
            return AWSResponse("https://sqs", 503, HTTPHeaders(), None), parsed

        dynamodb.meta.events.register_first("before-call.dynamodb.PutItem", turn_write)
        sqs.meta.events.register_first("before-call.sqs.SendMessage", send)


def lambda_client_into(events: AsyncEvents) -> Any:
    """A boto3 Lambda client whose ``Invoke(InvocationType=Event)`` queues the event in
    ``events`` and answers 202, as the Lambda service does."""
    client = boto3.client("lambda", region_name=REGION)

    def invoke(params: dict[str, Any], **_: Any) -> Any:
        name = params["url_path"].split("/functions/", 1)[1].split("/", 1)[0]
        events.submit(name, json.loads(params["body"] or b"{}"))
        parsed = {"StatusCode": 202, "ResponseMetadata": {"HTTPStatusCode": 202}}
        return AWSResponse("https://lambda", 202, HTTPHeaders(), None), parsed

    client.meta.events.register_first("before-call.lambda.Invoke", invoke)
    return client


class RepairQueueMapping:
    """RepairFunction's SQS event source, driven: ``drain`` receives until nothing is
    visible, invoking the function with each batch and deleting what succeeded."""

    def __init__(self, api: InProcessApi, sqs: Any) -> None:
        self.api = api
        self.sqs = sqs
        self.url = api.resources.queue_urls["RepairQueue"]
        self.dlq_url = api.resources.queue_urls["RepairDLQ"]
        self.arn = sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def drain(self) -> None:
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                return
            event = sqs_event(messages, self.arn)
            result = self.api.invoke("RepairFunction", event)
            done = succeeded_records(event["Records"], result, True)
            delete_records(self.sqs, self.url, done)

    def depth(self, url: str | None = None) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url or self.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )


def run_outage_soak(
    fault_rate: float, turns: int = 400, sessions: int = 20, seed: int = 7
) -> SoakResult:
    """``turns`` turns over ``sessions`` sessions while writes and sends fail at
    ``fault_rate``; then drive the repair paths until they are empty."""
    clock = FakeClock()
    metrics = FakeMetrics()
    outage = Outage(fault_rate, seed)
    holder: dict[str, AsyncEvents] = {}
    lambda_client = lambda_client_into(_Forward(holder))  # type: ignore[arg-type]
    env = {"REPAIR_FUNCTION_NAME": "RepairFunction", "SUMMARY_QUEUE_URL": ""}
    with (
        moto_sqs_clock(clock),
        inprocess_stack(
            env,
            clock=clock,
            monotonic=clock,
            sleep=clock.advance,
            metrics=metrics,
            **{"lambda": lambda_client},
        ) as api,
    ):
        sqs = api.container.infrastructure.clients["sqs"]
        configs = async_invoke_configs(load_template(DEFAULT_TEMPLATE), api.resources.queue_urls)
        events = holder["events"] = AsyncEvents(api.registry, configs, lambda: sqs, clock=clock)
        repairs = RepairQueueMapping(api, sqs)
        _, token = new_workspace(api, "soak")
        session_ids = [_open_session(api, token) for _ in range(sessions)]
        outage.attach(api.container.infrastructure.clients["dynamodb"], sqs)

        answered: dict[str, str] = {}
        outage.on = True
        next_drive = clock() + DRIVE_EVERY_SECONDS
        for index in range(turns):
            session_id = session_ids[index % sessions]
            text = f"soak turn {index:05d}"
            response = api.call(
                "POST",
                "/v1/capabilities/cap-generative/predict",
                token=token,
                json_body={"input": text, "sessionId": session_id},
            )
            if response.status == 200:
                answered[text] = session_id
            clock.advance(TURN_SPACING_SECONDS)
            if clock() >= next_drive:
                repairs.drain()
                events.run_due()
                next_drive = clock() + DRIVE_EVERY_SECONDS
        outage.on = False
        stopped = clock()

        settled: float | None = None
        while clock() - stopped <= SETTLE_LIMIT_SECONDS:
            repairs.drain()
            events.run_due()
            if repairs.depth() == 0 and events.pending() == 0:
                settled = clock() - stopped
                break
            clock.advance(DRIVE_EVERY_SECONDS)

        seen: dict[str, int] = {}
        for session_id in session_ids:
            for message in _transcript(api, token, session_id):
                if message["role"] == "user":
                    seen[message["content"]] = seen.get(message["content"], 0) + 1
        return SoakResult(
            fault_rate=fault_rate,
            turns=turns,
            answered=len(answered),
            lost=sum(1 for text in answered if text not in seen),
            duplicated=sum(1 for text in answered if seen.get(text, 0) > 1),
            settled_after_seconds=settled,
            faults_injected=outage.injected,
            unrecorded_answers=metrics.counts["TranscriptWriteFailed"],
            queued_repairs=metrics.counts["TranscriptWriteFailed"]
            - metrics.counts["TranscriptRepairInvoked"]
            - metrics.counts["TranscriptLost"],
            invoked_repairs=metrics.counts["TranscriptRepairInvoked"],
            counted_lost=metrics.counts["TranscriptLost"],
            in_dead_letter_queue=repairs.depth(repairs.dlq_url),
        )


class _Forward:
    """Lambda's event queue, created once the stack (and its registry) exists."""

    def __init__(self, holder: dict[str, AsyncEvents]) -> None:
        self._holder = holder

    def submit(self, name: str, event: Any, request_id: str | None = None) -> None:
        self._holder["events"].submit(name, event, request_id)


def _open_session(api: InProcessApi, token: str) -> str:
    body = {"capabilityId": "cap-generative", "externalRef": "soak"}
    response = api.call("POST", "/v1/sessions", token=token, json_body=body)
    assert response.status == 201, response.body
    return str(response.body["id"])


def _transcript(api: InProcessApi, token: str, session_id: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    query: dict[str, Any] = {"limit": 100}
    while True:
        response = api.call("GET", f"/v1/sessions/{session_id}/messages", token=token, query=query)
        assert response.status == 200, response.body
        messages.extend(response.body["messages"])
        if not response.body.get("nextToken"):
            return messages
        query = {"limit": 100, "nextToken": response.body["nextToken"]}
