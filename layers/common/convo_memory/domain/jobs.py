"""The bodies of the service's background jobs, as typed models: what a turn hands the
summary worker (``SummaryJob``) and the transcript repair worker (``RepairJob``), and
what the erasure worker takes (``ErasureJob``: finish an end user's erasure;
``SweepJob``: sweep deleted or erased sessions again once no write in flight can land;
``ForkCopyJob``: copy a new fork's older inherited messages in from its parent).

Both are camelCase JSON. Unknown fields are ignored, so that a producer deployed before
its consumer (or after) never turns its jobs into poison pills. A repair job too large
for SQS travels compressed (``{"workspaceId", "sessionId", "packed"}``) and, if even
that does not fit, with its stored answer cut; ``RepairJob`` reads every form it can
arrive in, including the record Lambda sends to an on-failure destination after an
asynchronous invocation failed (the job is its ``requestPayload``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.turn_records import TurnRecord, cut_to_bytes

# SQS takes at most 256 KiB per message (an asynchronous Lambda invocation at least as
# much); a larger repair body is compressed, and cut only if even that does not fit.
MAX_JOB_BODY_BYTES = 250 * 1024


class JobModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    def to_body(self) -> dict[str, Any]:
        """The JSON object a queue or an invocation carries."""
        return self.model_dump(by_alias=True, mode="json")


class SummaryJob(JobModel):
    """Fold this session's summary ahead of its replay window."""

    workspace_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)


class TurnBody(JobModel):
    """A turn whose transcript write missed the serving path (``TurnRecord`` on the wire)."""

    turn_id: str = Field(min_length=1)
    user_content: str
    answer: str
    withheld: bool
    truncated: bool = False
    created_at: str
    digest_tools: tuple[str, ...] = ()
    digest_text: str | None = None
    digest_expires_at: float | None = None
    run_id: str | None = None
    idempotency_record: str | None = None
    prompt_record: PromptRecord | None = None
    # (v4) A turn paused for the app's tools: abandoned, and the pause it ends.
    abandoned: bool = False
    resolves: str | None = None
    response: str | None = None
    # (v5) Its position may hold the turn it repeats (a retry's twin).
    yields_to_twin: bool = False
    # (v5) Its attachments' references (``attachments.encode_refs``: where the bytes are
    # too, which a reference's JSON does not show).
    attachments: str = "[]"

    @classmethod
    def of(cls, turn: TurnRecord) -> TurnBody:
        from convo_memory.domain.attachments import encode_refs

        fields = {f.name: getattr(turn, f.name) for f in dataclasses.fields(turn)}
        return cls(**{**fields, "attachments": encode_refs(turn.attachments)})

    def record(self) -> TurnRecord:
        from convo_memory.domain.attachments import decode_refs

        names = (f.name for f in dataclasses.fields(TurnRecord) if f.name != "attachments")
        kept = {name: getattr(self, name) for name in names}
        return TurnRecord(**kept, attachments=tuple(decode_refs(self.attachments)))


class RepairJob(JobModel):
    """Land this turn in this session's transcript, once. ``position`` is the user seq
    its failed write aimed at: the turn, if it landed after all, is at or after it."""

    workspace_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    position: int = Field(default=1, ge=1)
    turn: TurnBody

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("requestPayload"), dict):
            data = data["requestPayload"]  # a Lambda on-failure destination's record
        if isinstance(data, dict) and isinstance(data.get("packed"), str):
            try:
                data = json.loads(zlib.decompress(base64.b64decode(data["packed"], validate=True)))
            except (ValueError, zlib.error) as exc:
                raise ValueError(f"packed repair job cannot be opened: {exc}") from exc
        return data

    @classmethod
    def of(cls, workspace_id: str, session_id: str, position: int, turn: TurnRecord) -> RepairJob:
        return cls(
            workspace_id=workspace_id,
            session_id=session_id,
            position=max(1, position),
            turn=TurnBody.of(turn),
        )

    def to_message(self) -> dict[str, Any]:
        """The body for SQS or an asynchronous invocation: plain JSON when it fits, else
        compressed; an answer too large even compressed is cut (and marked truncated)."""
        body = self.to_body()
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(raw) <= MAX_JOB_BODY_BYTES:
            return body
        packed = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
        if len(packed) <= MAX_JOB_BODY_BYTES:
            return {
                "workspaceId": self.workspace_id,
                "sessionId": self.session_id,
                "packed": packed,
            }
        if not self.turn.answer:
            return body  # nothing left to cut: the send fails and is counted
        # Incompressible and huge: cut the stored answer until it fits (the client has it all).
        answer_bytes = len(self.turn.answer.encode("utf-8"))
        room = MAX_JOB_BODY_BYTES - (len(raw) - answer_bytes) - 4096
        room = min(max(0, room), answer_bytes // 2)
        cut = self.turn.model_copy(
            update={"answer": cut_to_bytes(self.turn.answer, room), "truncated": True}
        )
        return self.model_copy(update={"turn": cut}).to_message()


# A sweep job names at most this many sessions (an SQS body stays far below 256 KiB).
MAX_SWEEP_SESSIONS = 500


class ErasureJob(JobModel):
    """Finish erasure ``erasure_id`` of this workspace (its receipt says whose)."""

    kind: Literal["erase"] = "erase"
    workspace_id: str = Field(min_length=1)
    erasure_id: str = Field(min_length=1)


class SweepJob(JobModel):
    """Sweep these sessions again, once no write that was in flight when they were
    deleted or erased can still land: whatever such a write left is removed (with its
    run traces when ``erase_traces``, counted on erasure ``erasure_id``'s receipt). A
    live session's items are never touched."""

    kind: Literal["sweep"] = "sweep"
    workspace_id: str = Field(min_length=1)
    session_ids: tuple[str, ...] = Field(default=(), max_length=MAX_SWEEP_SESSIONS)
    erasure_id: str | None = None
    erase_traces: bool = False
    # An erasure's last sweep also lists the end user again: a session the index showed
    # too late for the job is erased then.
    recheck: bool = False


class ForkCopyJob(JobModel):
    """Copy the older inherited messages of fork ``fork_id`` (and the summary versions
    behind them) in from its parent ``parent_id``, so that it holds all it needs of its
    own. Idempotent and resumable: a delivery cut short goes on from the fork's copy
    mark; one for a fork deleted or already complete does nothing."""

    kind: Literal["fork_copy"] = "fork_copy"
    workspace_id: str = Field(min_length=1)
    parent_id: str = Field(min_length=1)
    fork_id: str = Field(min_length=1)


# What the erasure queue carries: erasures and sweeps (and fork copies queued there
# before forks had a queue of their own, ForkCopyQueue, which the deployment drains).
ErasureWork = Annotated[ErasureJob | SweepJob | ForkCopyJob, Field(discriminator="kind")]
