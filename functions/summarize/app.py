"""SummaryQueue consumer: folds a session's summary ahead of its replay window
(``SummaryService.fold``), one job per record.

A record that names no session (not JSON, or no ``workspaceId`` / ``sessionId``) can
never succeed: it is logged and dropped rather than retried into the DLQ, which loses
nothing because the summary is derived state and the session's next turn triggers a new
job. Any other error (summarizer outage, throttling) fails just that record: SQS
redelivers it, and after ``maxReceiveCount`` it moves to SummaryDLQ.

The worker never sends a message itself (a chain of self-sent messages is what Lambda's
recursive-loop detection stops). A job that runs out of invocation time before its
backlog is folded keeps what it stored, and its record fails with a short visibility
timeout, so SQS delivers the same message again within seconds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from convo_memory.observability import (
    job_handler,
    logger,
    record_correlation_id,
    set_correlation_id,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse

# Report every failed record, even when all failed, rather than failing the invocation:
# SQS redelivers them either way, and the response says exactly which ones failed.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
# How soon an unfinished backlog is picked up again.
REDELIVER_SECONDS = 10


class BacklogRemaining(RuntimeError):
    """The job stopped for lack of time with messages left to fold: redeliver it."""


def summary_job(body: str) -> tuple[str, str] | None:
    """``(workspaceId, sessionId)`` from a record body; None when it names no session."""
    try:
        job = json.loads(body)
    except (TypeError, ValueError):
        return None
    if not isinstance(job, dict):
        return None
    workspace, session = job.get("workspaceId"), job.get("sessionId")
    if isinstance(workspace, str) and workspace and isinstance(session, str) and session:
        return workspace, session
    return None


def fold_record(record: SQSRecord, lambda_context: Any = None) -> None:
    from convo_memory.bootstrap import get_container

    # The turn's correlation id, carried by the message: its logs and the job's match.
    set_correlation_id(record_correlation_id(record) or record.message_id)
    job = summary_job(record.body)
    container = get_container()
    if job is None:
        logger.error(
            "dropping a summary job that names no session",
            extra={"messageId": record.message_id, "body": record.body[:200]},
        )
        container.metrics.count("SummaryJobsDropped")
        return
    workspace, session = job

    def time_left() -> float:
        return float(lambda_context.get_remaining_time_in_millis()) / 1000

    try:
        outcome = container.summaries.fold(
            workspace, session, time_left if lambda_context is not None else None
        )
    except Exception:
        logger.exception(
            "summary job failed", extra={"messageId": record.message_id, "sessionId": session}
        )
        raise
    logger.info(
        "summary job done",
        extra={
            "messageId": record.message_id,
            "sessionId": session,
            "status": outcome.status,
            "throughSeq": outcome.through_seq,
            "targetSeq": outcome.target_seq,
            "foldedMessages": outcome.folded_messages,
            "summarizerCalls": outcome.summarizer_calls,
        },
    )
    if outcome.status == "partial":
        container.metrics.count("SummaryBacklogRedelivered")
        queue = container.summary_queue
        if queue is not None and hasattr(queue, "redeliver_after"):
            queue.redeliver_after(record.receipt_handle, REDELIVER_SECONDS)
        raise BacklogRemaining(
            f"session {session}: folded through {outcome.through_seq} of "
            f"{outcome.target_seq}; the rest on redelivery"
        )


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=fold_record, processor=processor, context=context
    )
