"""SummaryQueue consumer: folds a session's summary ahead of its replay window
(``SummaryService.fold``), one ``SummaryJob`` per record.

A record whose body is no ``SummaryJob`` (not JSON, or no ``workspaceId`` /
``sessionId``) can never succeed: it is logged and dropped rather than retried into the
DLQ, which loses nothing because the summary is derived state and the session's next
turn triggers a new job (``convo_memory.workers.batches``). Any other error (summarizer
outage, throttling) fails just that record: SQS redelivers it, and after
``maxReceiveCount`` it moves to SummaryDLQ.

The worker never sends a message itself (a chain of self-sent messages is what Lambda's
recursive-loop detection stops). A job that runs out of invocation time before its
backlog is folded keeps what it stored, and its record fails with a short visibility
timeout, so SQS delivers the same message again within seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convo_memory.domain.time_budget import time_left
from convo_memory.observability import (
    job_handler,
    logger,
    record_correlation_id,
    set_correlation_id,
)
from convo_memory.workers.batches import (
    JobBatch,
    PartialItemFailureResponse,
    count_metric,
    drop_malformed_summary_job,
    redeliver_after,
)

if TYPE_CHECKING:
    from convo_memory.workers.records import SummaryJobRecord

processor = JobBatch("summary", drop_malformed_summary_job(count_metric))
# How soon an unfinished backlog is picked up again.
REDELIVER_SECONDS = 10


class BacklogRemaining(RuntimeError):
    """The job stopped for lack of time with messages left to fold: redeliver it."""


def fold_record(record: SummaryJobRecord, lambda_context: Any = None) -> None:
    from convo_memory.execution_environment import get_container

    # The turn's correlation id, carried by the message: its logs and the job's match.
    set_correlation_id(record_correlation_id(record) or record.messageId)
    job = record.body
    container = get_container()
    try:
        outcome = container.summaries.fold(
            job.workspace_id, job.session_id, time_left(lambda_context)
        )
    except Exception:
        logger.exception(
            "summary job failed",
            extra={"messageId": record.messageId, "sessionId": job.session_id},
        )
        raise
    logger.info(
        "summary job done",
        extra={
            "messageId": record.messageId,
            "sessionId": job.session_id,
            "status": outcome.status,
            "throughSeq": outcome.through_seq,
            "targetSeq": outcome.target_seq,
            "foldedMessages": outcome.folded_messages,
            "summarizerCalls": outcome.summarizer_calls,
        },
    )
    if outcome.status == "partial":
        container.adapters.metrics.count("SummaryBacklogRedelivered")
        redeliver_after(container.adapters.summary_queue, record, REDELIVER_SECONDS)
        raise BacklogRemaining(
            f"session {job.session_id}: folded through {outcome.through_seq} of "
            f"{outcome.target_seq}; the rest on redelivery"
        )


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return processor.process(event, fold_record, context)
