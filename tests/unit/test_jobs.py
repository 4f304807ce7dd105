"""The typed job bodies: what a turn hands the workers, in every form it travels."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import ValidationError

from convo_memory.domain.jobs import MAX_JOB_BODY_BYTES, RepairJob, SummaryJob, TurnBody
from convo_memory.domain.turn_records import TurnRecord

TURN = TurnRecord(
    turn_id="t" * 32,
    user_content="Can I still cancel it?",
    answer="Yes, until Friday.",
    withheld=False,
    created_at="2025-01-01T12:00:00.000Z",
)


def test_a_summary_job_is_camel_case_and_refuses_a_body_naming_no_session() -> None:
    job = SummaryJob(workspace_id="ws-1", session_id="ses-1")
    assert job.to_body() == {"workspaceId": "ws-1", "sessionId": "ses-1"}
    assert SummaryJob.model_validate_json('{"workspaceId":"ws-1","sessionId":"ses-1","x":1}') == job
    for bad in ('{"workspaceId": "ws-1"}', '{"workspaceId": "", "sessionId": "s"}', "[]", "no"):
        with pytest.raises(ValidationError):
            SummaryJob.model_validate_json(bad)


def test_a_repair_job_round_trips_its_turn() -> None:
    job = RepairJob.of("ws-1", "ses-1", 3, TURN)
    body = json.loads(json.dumps(job.to_message()))

    again = RepairJob.model_validate(body)
    assert again == job and again.turn.record() == TURN
    assert body["turn"]["turnId"] == TURN.turn_id and body["position"] == 3


def test_a_repair_job_carries_every_field_of_a_turn_record() -> None:
    # A field TurnRecord gains must travel too, or a repaired turn would lose it.
    assert set(TurnBody.model_fields) == {f.name for f in dataclasses.fields(TurnRecord)}
    full = dataclasses.replace(
        TURN,
        truncated=True,
        digest_tools=("track",),
        digest_text="ETA Friday",
        digest_expires_at=1_700_000_000.0,
        run_id="run_1",
        idempotency_record="idem#1",
    )
    assert TurnBody.of(full).record() == full


def test_a_large_repair_job_travels_packed_and_a_huge_one_cut() -> None:
    large = RepairJob.of(
        "ws-1", "ses-1", 1, TURN.__class__(**{**TURN.__dict__, "answer": "ab" * 200_000})
    )
    packed = large.to_message()
    assert set(packed) == {"workspaceId", "sessionId", "packed"}
    assert RepairJob.model_validate(packed) == large

    import os

    noise = os.urandom(400_000).hex()
    huge = RepairJob.of("ws-1", "ses-1", 1, TURN.__class__(**{**TURN.__dict__, "answer": noise}))
    body = huge.to_message()
    assert len(json.dumps(body)) <= MAX_JOB_BODY_BYTES
    opened = RepairJob.model_validate(body)
    assert opened.turn.truncated and noise.startswith(opened.turn.answer)


def test_a_lambda_destination_record_yields_its_job() -> None:
    job = RepairJob.of("ws-1", "ses-1", 1, TURN)
    record = {"version": "1.0", "requestContext": {}, "requestPayload": job.to_message()}
    assert RepairJob.model_validate(record) == job


def test_a_malformed_repair_job_is_refused() -> None:
    for bad in ({"workspaceId": "ws-1"}, {"workspaceId": "w", "sessionId": "s", "packed": "!!"}):
        with pytest.raises(ValidationError):
            RepairJob.model_validate(bad)
