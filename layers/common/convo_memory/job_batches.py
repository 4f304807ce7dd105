"""The SQS batches of the workers, typed: Powertools' ``BatchProcessor`` parses each
record into a model whose body is a ``SummaryJob``, a ``RepairJob``, or the erasure
worker's ``ErasureJob`` / ``SweepJob`` (``EventType.SQS, model=...``), so the handlers
never read a dict.

A body that fails its model (not JSON, a field missing) can never succeed, whoever
retries it. What happens to it is each worker's choice:

- a summary job is **dropped** (logged with the start of its body, counted in
  ``SummaryJobsDropped``): the summary is derived state, and the session's next turn
  asks for a new job, so nothing is lost and a retry would only end in the DLQ;
- a repair job is **failed** (reported in ``batchItemFailures``, logged, counted in
  ``RepairJobsMalformed``): it may hold a turn an operator can still read, so it goes
  through its retries into RepairDLQ (kept 14 days, alarmed) rather than away;
- an erasure job is **failed** too (``ErasureJobsMalformed``): into ErasureDLQ, alarmed,
  where an operator sees what it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import Json, ValidationError

from convo_memory.domain.jobs import ErasureWork, RepairJob, SummaryJob
from convo_memory.observability import logger

BODY_LOG_CHARS = 200


class SummaryJobRecord(SqsRecordModel):
    body: Json[SummaryJob]


class RepairJobRecord(SqsRecordModel):
    body: Json[RepairJob]


class ErasureJobRecord(SqsRecordModel):
    body: Json[ErasureWork]


def receive_count(record: SqsRecordModel) -> int:
    """How many times SQS has delivered this record (1 on its first delivery)."""
    try:
        return max(1, int(record.attributes.ApproximateReceiveCount))
    except (TypeError, ValueError):
        return 1


def backoff_seconds(deliveries: int, first: int, most: int) -> int:
    """How long a job that failed its ``deliveries``-th delivery waits for the next:
    ``first`` seconds, doubling with each delivery, at most ``most``."""
    return min(most, first * 2 ** (max(1, deliveries) - 1))


def redeliver_after(queue: object | None, record: SqsRecordModel, seconds: int) -> None:
    """Make the failing ``record`` visible again after ``seconds`` rather than the
    queue's visibility timeout (a queue without that ability, or an SQS error, leaves
    the timeout in force: the record is retried either way)."""
    redeliver = getattr(queue, "redeliver_after", None)
    if not callable(redeliver):
        return
    try:
        redeliver(record.receiptHandle, seconds)
    except Exception:
        logger.warning("could not shorten the job's visibility", exc_info=True)


def count_metric(name: str) -> None:
    """Count ``name`` once in this invocation's metrics (for a worker's malformed jobs)."""
    from convo_memory.bootstrap import get_container

    get_container().metrics.count(name)


class JobBatch(BatchProcessor):
    """A ``BatchProcessor`` over one job model that reports every failed record, even
    when all failed (SQS redelivers them either way), and hands a record whose body
    fails the model to ``on_malformed``: True drops it, False fails it."""

    def __init__(
        self,
        model: type[SqsRecordModel],
        on_malformed: Callable[[Any, ValidationError], bool],
    ) -> None:
        super().__init__(event_type=EventType.SQS, model=model, raise_on_entire_batch_failure=False)
        self._model_name = model.__name__
        self._on_malformed = on_malformed

    def failure_handler(self, record: Any, exception: Any) -> Any:
        error = exception[1]
        malformed = isinstance(error, ValidationError) and error.title == self._model_name
        if malformed and self._on_malformed(record, error):
            return self.success_handler(record, None)
        return super().failure_handler(record, exception)


def _raw(record: Any) -> tuple[str, str]:
    """(messageId, the start of the body) of a record that failed its model."""
    message_id = str(getattr(record, "message_id", "") or getattr(record, "messageId", ""))
    body = getattr(record, "body", "")
    return message_id, str(body)[:BODY_LOG_CHARS]


def drop_malformed_summary_job(count: Callable[[str], None]) -> Callable[[Any, Any], bool]:
    def drop(record: Any, error: ValidationError) -> bool:
        message_id, body = _raw(record)
        logger.error(
            "dropping a summary job that names no session",
            extra={"messageId": message_id, "body": body, "problems": error.error_count()},
        )
        count("SummaryJobsDropped")
        return True

    return drop


def fail_malformed_repair_job(count: Callable[[str], None]) -> Callable[[Any, Any], bool]:
    def fail(record: Any, error: ValidationError) -> bool:
        message_id, body = _raw(record)
        logger.error(
            "a repair job that is no RepairJob: failed, on to RepairDLQ after its retries",
            extra={"messageId": message_id, "body": body, "problems": error.error_count()},
        )
        count("RepairJobsMalformed")
        return False

    return fail


def fail_malformed_erasure_job(count: Callable[[str], None]) -> Callable[[Any, Any], bool]:
    def fail(record: Any, error: ValidationError) -> bool:
        message_id, body = _raw(record)
        logger.error(
            "an erasure job that is no ErasureJob or SweepJob: failed, on to ErasureDLQ",
            extra={"messageId": message_id, "body": body, "problems": error.error_count()},
        )
        count("ErasureJobsMalformed")
        return False

    return fail


__all__ = [
    "ErasureJobRecord",
    "JobBatch",
    "PartialItemFailureResponse",
    "RepairJobRecord",
    "SummaryJobRecord",
    "drop_malformed_summary_job",
    "fail_malformed_erasure_job",
    "fail_malformed_repair_job",
    "receive_count",
]
