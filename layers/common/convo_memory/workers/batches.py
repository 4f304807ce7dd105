"""The SQS batches of the workers, typed: each record is parsed into a model whose
body is a ``SummaryJob``, a ``RepairJob``, or the erasure worker's ``ErasureJob`` /
``SweepJob``, so the handlers never read a dict, and the batch answers with the records
that failed (``batchItemFailures``: the event source's ``ReportBatchItemFailures``), so
SQS redelivers only those.

This is what Powertools' ``BatchProcessor`` with a parser model does, in a few lines:
importing Powertools' batch utility imports every one of its parser models (about 130 ms
of a cold start, more than ``import boto3``), and the workers need one record shape
(``convo_memory.workers.records``), imported with pydantic on the first batch.

A body that fails its model (not JSON, a field missing) can never succeed, whoever
retries it. What happens to it is each worker's choice:

- a summary job is **dropped** (logged with the start of its body, counted in
  ``SummaryJobsDropped``): the summary is derived state, and the session's next turn
  asks for a new job, so nothing is lost and a retry would only end in the DLQ;
- a repair job is **failed** (reported in ``batchItemFailures``, logged, counted in
  ``RepairJobsMalformed``): it may hold a turn an operator can still read, so it goes
  through its retries into RepairDLQ (kept 14 days, alarmed) rather than away;
- an erasure job is **failed** too (``ErasureJobsMalformed``): into ErasureDLQ, alarmed,
  where an operator sees what it was; so is a fork copy job (``ForkCopyJobsMalformed``,
  into ForkCopyDLQ).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from convo_memory.observability import logger

if TYPE_CHECKING:
    from pydantic import ValidationError

    from convo_memory.workers.records import SqsJobRecord

BODY_LOG_CHARS = 200
# Which record model a worker's batch parses (``convo_memory.workers.records``, imported on
# the first batch: a cold start imports neither pydantic nor the job models).
JobKind = Literal["summary", "repair", "erasure", "fork_copy"]


def record_model(kind: JobKind) -> type[SqsJobRecord[Any]]:
    """The record model of a kind of job."""
    from convo_memory.workers import records as job_records

    models: dict[str, type[SqsJobRecord[Any]]] = {
        "summary": job_records.SummaryJobRecord,
        "repair": job_records.RepairJobRecord,
        "erasure": job_records.ErasureJobRecord,
        "fork_copy": job_records.ForkCopyJobRecord,
    }
    return models[kind]


class ItemFailure(TypedDict):
    itemIdentifier: str


class PartialItemFailureResponse(TypedDict):
    batchItemFailures: list[ItemFailure]


def receive_count(record: SqsJobRecord[Any]) -> int:
    """How many times SQS has delivered this record (1 on its first delivery)."""
    try:
        return max(1, int(record.attributes.ApproximateReceiveCount))
    except (TypeError, ValueError):
        return 1


def backoff_seconds(deliveries: int, first: int, most: int) -> int:
    """How long a job that failed its ``deliveries``-th delivery waits for the next:
    ``first`` seconds, doubling with each delivery, at most ``most``."""
    return min(most, first * 2 ** (max(1, deliveries) - 1))


def redeliver_after(queue: object | None, record: SqsJobRecord[Any], seconds: int) -> None:
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
    from convo_memory.execution_environment import get_container

    get_container().adapters.metrics.count(name)


class JobBatch:
    """The records of one job model: each parsed and handed to a record handler
    (``handler(record, lambda_context)``), a failure reported for each record that
    failed, even when all did (SQS redelivers them either way). A record whose body
    fails the model goes to ``on_malformed``: True drops it, False fails it."""

    def __init__(
        self,
        kind: JobKind,
        on_malformed: Callable[[Any, ValidationError], bool],
    ) -> None:
        self._kind = kind
        self._on_malformed = on_malformed

    def process(
        self,
        event: Mapping[str, Any],
        handler: Callable[[Any, Any], object],
        context: Any = None,
    ) -> PartialItemFailureResponse:
        """Handle every record of the SQS ``event``; the ones to redeliver."""
        from pydantic import ValidationError

        model = record_model(self._kind)
        failures: list[ItemFailure] = []
        for raw in event.get("Records") or []:
            message_id = str(raw.get("messageId", "")) if isinstance(raw, Mapping) else ""
            try:
                record = model.model_validate(raw)
            except ValidationError as error:
                if not self._on_malformed(raw, error):
                    failures.append({"itemIdentifier": message_id})
                continue
            try:
                handler(record, context)
            except Exception:
                # The handler logged what it knows; the record comes back.
                logger.debug("record %s failed", message_id, exc_info=True)
                failures.append({"itemIdentifier": message_id})
        return {"batchItemFailures": failures}


def _raw(record: Any) -> tuple[str, str]:
    """(messageId, the start of the body) of a record that failed its model."""
    record = record if isinstance(record, Mapping) else {}
    return str(record.get("messageId", "")), str(record.get("body", ""))[:BODY_LOG_CHARS]


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


def fail_malformed_fork_copy_job(count: Callable[[str], None]) -> Callable[[Any, Any], bool]:
    def fail(record: Any, error: ValidationError) -> bool:
        message_id, body = _raw(record)
        logger.error(
            "a fork copy job that is no ForkCopyJob: failed, on to ForkCopyDLQ",
            extra={"messageId": message_id, "body": body, "problems": error.error_count()},
        )
        count("ForkCopyJobsMalformed")
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
    "JobBatch",
    "PartialItemFailureResponse",
    "drop_malformed_summary_job",
    "fail_malformed_erasure_job",
    "fail_malformed_fork_copy_job",
    "fail_malformed_repair_job",
    "receive_count",
]
