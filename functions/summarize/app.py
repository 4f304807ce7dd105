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

from convo_memory.observability import job_handler, logger
from convo_memory.workers.batches import (
    PartialItemFailureResponse,
    count_metric,
    drop_malformed_summary_job,
)
from convo_memory.workers.worker import Delivery, RedeliverSoon, Worker

if TYPE_CHECKING:
    from convo_memory.domain.jobs import SummaryJob

# A failed job waits for the queue's visibility timeout (a summarizer outage is not
# retried within seconds); an unfinished backlog is picked up again this soon.
REDELIVER_SECONDS = 10
worker: Worker[SummaryJob] = Worker("summary", drop_malformed_summary_job(count_metric))


def fold(job: SummaryJob, delivery: Delivery) -> None:
    """Fold the session's summary ahead of its window, as far as the time allows."""
    container = delivery.container
    outcome = container.summaries.fold(job.workspace_id, job.session_id, delivery.time_left)
    logger.info(
        "summary job done",
        extra={
            "messageId": delivery.message_id,
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
        raise RedeliverSoon(
            REDELIVER_SECONDS,
            f"session {job.session_id}: folded through {outcome.through_seq} of "
            f"{outcome.target_seq}; the rest on redelivery",
        )


@job_handler
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return worker.handle(event, fold, context)
