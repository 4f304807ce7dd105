"""Recording a turn exactly once, and repairing the turns whose write failed.

A failed transcript write never fails the request: the inference was already paid for.
Any failure (capacity, availability, a refused item, an unexpected error) returns the
answer with ``recorded: false`` and hands the turn to the durable repair queue. The
repair consumer lands it once: the turn's id is stored with it, so a write that did land
before its timeout, or a second delivery, is found and not written again.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from convo_memory.domain.errors import StoreRejected, StoreUnavailable
from convo_memory.domain.models import Session, TurnSeqs
from convo_memory.domain.turn_records import AppendResult, TurnRecord, cut_to_bytes
from convo_memory.ports import MetricsPort, QueuePort, SessionStore, TurnStore

logger = logging.getLogger(__name__)

# SQS takes at most 256 KiB per message; a larger repair body is compressed, and cut
# only if even that does not fit.
MAX_QUEUE_BODY_BYTES = 250 * 1024

RepairOutcome = Literal["recorded", "already_recorded", "session_gone", "unlandable"]


@dataclass(frozen=True)
class Recorded:
    seqs: TurnSeqs | None
    recorded: bool


class TurnRecorder:
    def __init__(
        self,
        turns: TurnStore,
        sessions: SessionStore,
        repair_queue: QueuePort | None,
        metrics: MetricsPort,
        after_repair: Callable[[str, str], object] | None = None,
    ) -> None:
        self._turns = turns
        self._sessions = sessions
        self._repair_queue = repair_queue
        self._metrics = metrics
        # Told (workspace, session) when a repair lands a turn: the summary may be due.
        self._after_repair = after_repair

    def record(self, workspace_id: str, session: Session, turn: TurnRecord) -> Recorded:
        """Append the turn after the session's last message (one conditional put, plus
        the digest on turns that called tools). Never raises."""
        try:
            result = self._turns.append_turn(session.id, session.message_count, turn)
        except Exception as exc:
            level = logging.WARNING if isinstance(exc, StoreUnavailable) else logging.ERROR
            logger.log(
                level,
                "transcript write failed for session %s (%s); queued for repair",
                session.id,
                type(exc).__name__,
                exc_info=not isinstance(exc, StoreUnavailable),
            )
            self._metrics.count("TranscriptWriteFailed")
            self._queue_repair(workspace_id, session, turn)
            return Recorded(None, False)
        self._store_digest(session.id, result, turn)
        return Recorded(
            TurnSeqs(user_seq=result.user_seq, assistant_seq=result.assistant_seq), True
        )

    def _store_digest(self, session_id: str, result: AppendResult, turn: TurnRecord) -> None:
        if not turn.has_digest:
            return
        try:
            self._turns.put_digest(session_id, result.user_seq, turn)
        except Exception:
            # The transcript is recorded; only the tool digest (derived, short-lived) is lost.
            logger.exception("tool digest write failed for session %s", session_id)
            self._metrics.count("DigestWriteFailed")

    def _queue_repair(self, workspace_id: str, session: Session, turn: TurnRecord) -> None:
        if self._repair_queue is None:
            logger.error("no repair queue configured; turn %s is lost", turn.turn_id)
            self._metrics.count("TranscriptRepairEnqueueFailed")
            return
        body = repair_body(workspace_id, session.id, session.message_count + 1, turn)
        try:
            self._repair_queue.send(body)
        except Exception:
            logger.exception("could not enqueue transcript repair for turn %s", turn.turn_id)
            self._metrics.count("TranscriptRepairEnqueueFailed")

    def repair(self, body: dict[str, Any]) -> RepairOutcome:
        """Land a turn whose transcript write failed on the request path, once.

        Appends at the session's current end unless the turn is already stored (a write
        that landed before its timeout). Capacity errors propagate so the queue retries;
        a turn the store refuses for good is counted and dropped instead of cycling
        through the queue into its DLQ."""
        job = open_repair_body(body)
        workspace_id, session_id = str(job["workspaceId"]), str(job["sessionId"])
        turn = turn_from_dict(job["turn"])
        session = self._sessions.get_session(session_id)
        if session is None or session.workspace_id != workspace_id:
            logger.warning("repair for a deleted session %s dropped", session_id)
            return "session_gone"
        try:
            found = self._turns.find_turn(session_id, turn.turn_id, int(job.get("position", 1)))
            if found is not None:
                self._store_digest(session_id, found, turn)
                return "already_recorded"
            result = self._turns.append_turn(session_id, session.message_count, turn)
        except StoreRejected:
            logger.exception("turn %s of session %s cannot be stored", turn.turn_id, session_id)
            self._metrics.count("TranscriptRepairFailed")
            return "unlandable"
        self._store_digest(session_id, result, turn)
        if result.already_recorded:
            return "already_recorded"
        self._metrics.count("TranscriptRepaired")
        if self._after_repair is not None:
            self._after_repair(workspace_id, session_id)
        return "recorded"


def turn_to_dict(turn: TurnRecord) -> dict[str, Any]:
    return {
        "turnId": turn.turn_id,
        "userContent": turn.user_content,
        "answer": turn.answer,
        "withheld": turn.withheld,
        "truncated": turn.truncated,
        "createdAt": turn.created_at,
        "digestTools": list(turn.digest_tools),
        "digestText": turn.digest_text,
        "digestExpiresAt": turn.digest_expires_at,
        "runId": turn.run_id,
    }


def turn_from_dict(data: dict[str, Any]) -> TurnRecord:
    return TurnRecord(
        turn_id=str(data["turnId"]),
        user_content=str(data["userContent"]),
        answer=str(data["answer"]),
        withheld=bool(data["withheld"]),
        truncated=bool(data.get("truncated", False)),
        created_at=str(data["createdAt"]),
        digest_tools=tuple(data.get("digestTools") or ()),
        digest_text=data.get("digestText"),
        digest_expires_at=data.get("digestExpiresAt"),
        run_id=data.get("runId"),
    )


def repair_body(
    workspace_id: str, session_id: str, position: int, turn: TurnRecord
) -> dict[str, Any]:
    """The repair queue's message for a turn: plain JSON when it fits, else compressed;
    an answer too large even compressed is cut (and marked truncated)."""
    job = {
        "workspaceId": workspace_id,
        "sessionId": session_id,
        "position": position,
        "turn": turn_to_dict(turn),
    }
    raw = json.dumps(job, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(raw) <= MAX_QUEUE_BODY_BYTES:
        return job
    packed = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    if len(packed) <= MAX_QUEUE_BODY_BYTES:
        return {"workspaceId": workspace_id, "sessionId": session_id, "packed": packed}
    if not turn.answer:
        return job  # nothing left to cut: the send fails and is counted
    # Incompressible and huge: cut the stored answer until it fits (the client has it all).
    answer_bytes = len(turn.answer.encode("utf-8"))
    room = MAX_QUEUE_BODY_BYTES - (len(raw) - answer_bytes) - 4096
    room = min(max(0, room), answer_bytes // 2)
    smaller = replace(turn, answer=cut_to_bytes(turn.answer, room), truncated=True)
    return repair_body(workspace_id, session_id, position, smaller)


def open_repair_body(body: dict[str, Any]) -> dict[str, Any]:
    if "packed" in body:
        job: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(body["packed"])))
        return job
    return body
