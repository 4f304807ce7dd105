"""What every SQS worker does around its job, in one place: each record parsed into its
job (``batches.JobBatch``), logged under the correlation id the message carries, handed
to the worker's job function with what it needs of its delivery (the container, how
many times SQS has delivered it, the invocation's time left), and, when the job fails,
logged, counted and made visible again after a backoff by its receive count (rather
than after the queue's visibility timeout), so SQS redelivers it within seconds. The
handlers only say what a job does."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from convo_memory.domain.time_budget import time_left
from convo_memory.observability import logger, record_correlation_id, set_correlation_id
from convo_memory.workers.batches import (
    JobBatch,
    JobKind,
    PartialItemFailureResponse,
    backoff_seconds,
    receive_count,
    redeliver_after,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

    from convo_memory.bootstrap import Container
    from convo_memory.workers.records import SqsJobRecord

Job = TypeVar("Job")


@dataclass(frozen=True)
class Backoff:
    """How long a job that failed waits for its next delivery: ``first_seconds``,
    doubling with each delivery, at most ``most_seconds``."""

    first_seconds: int
    most_seconds: int

    def seconds(self, deliveries: int) -> int:
        return backoff_seconds(deliveries, self.first_seconds, self.most_seconds)


@dataclass(frozen=True)
class Delivery:
    """One delivery of a job, as its job function sees it."""

    container: Container
    message_id: str
    # How many times SQS has delivered this record (1 on its first delivery).
    deliveries: int
    # The seconds the invocation has left, read at each call.
    time_left: Callable[[], float]


class RedeliverSoon(RuntimeError):
    """The job stopped with work left (out of time): deliver it again after ``seconds``."""

    def __init__(self, seconds: int, reason: str) -> None:
        super().__init__(reason)
        self.seconds = seconds


# The queue a kind of job comes from, as the container's adapters name it.
QUEUE_OF: dict[JobKind, str] = {
    "summary": "summary_queue",
    "repair": "repair_queue",
    "erasure": "erasure_queue",
    "fork_copy": "fork_copy_queue",
}


class Worker(Generic[Job]):
    """A queue's worker: ``handle`` runs ``work(job, delivery)`` for each record of an
    SQS batch; a failing job is retried after ``backoff`` (None: the queue's visibility
    timeout), counted in ``retried_metric`` when given."""

    def __init__(
        self,
        kind: JobKind,
        on_malformed: Callable[[Any, ValidationError], bool],
        *,
        backoff: Backoff | None = None,
        retried_metric: str | None = None,
        seconds_without_clock: float = 900.0,
    ) -> None:
        self.kind = kind
        self.batch = JobBatch(kind, on_malformed)
        self.backoff = backoff
        self._retried_metric = retried_metric
        self._seconds_without_clock = seconds_without_clock

    def handle(
        self,
        event: Mapping[str, Any],
        work: Callable[[Job, Delivery], object],
        context: Any = None,
    ) -> PartialItemFailureResponse:
        """Every record of the SQS ``event``; the ones SQS is to deliver again."""
        return self.batch.process(event, partial(self.deliver, work), context)

    def redeliver_seconds(self, deliveries: int) -> int | None:
        """How long a job that failed its ``deliveries``-th delivery waits for the next."""
        return None if self.backoff is None else self.backoff.seconds(deliveries)

    def deliver(
        self,
        work: Callable[[Job, Delivery], object],
        record: SqsJobRecord[Job],
        lambda_context: Any = None,
    ) -> None:
        """One record: its job run under the message's correlation id; on failure,
        logged, counted and redelivered soon, then raised (the batch reports it)."""
        from convo_memory.execution_environment import get_container

        # The turn's correlation id, carried by the message: its logs and the job's match.
        set_correlation_id(record_correlation_id(record) or record.messageId)
        container = get_container()
        deliveries = receive_count(record)
        clock = time_left(lambda_context, default=self._seconds_without_clock)
        try:
            work(record.body, Delivery(container, record.messageId, deliveries, clock))
        except RedeliverSoon as soon:
            self._redeliver(container, record, soon.seconds)
            raise
        except Exception:
            wait = self.redeliver_seconds(deliveries)
            logger.warning(
                "%s job failed%s",
                self.kind,
                f"; retried in {wait} s" if wait is not None else "",
                exc_info=True,
                extra={"messageId": record.messageId, "deliveries": deliveries, **_named(record)},
            )
            if self._retried_metric:
                container.adapters.metrics.count(self._retried_metric)
            if wait is not None:
                self._redeliver(container, record, wait)
            raise

    def _redeliver(self, container: Container, record: SqsJobRecord[Any], seconds: int) -> None:
        queue = getattr(container.adapters, QUEUE_OF[self.kind])
        redeliver_after(queue, record, seconds)


def _named(record: SqsJobRecord[Any]) -> dict[str, str]:
    """What the failing job names, for its log line (its session, when it has one)."""
    session_id = getattr(record.body, "session_id", None)
    return {"sessionId": session_id} if isinstance(session_id, str) else {}
