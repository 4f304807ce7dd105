"""The SQS records of the workers' jobs, as pydantic models (``job_batches`` parses each
record with one of them): the parts of a record a worker reads, with its body parsed
into its job (``convo_memory.domain.jobs``)."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Json

from convo_memory.domain.jobs import ErasureWork, ForkCopyJob, RepairJob, SummaryJob

Job = TypeVar("Job")


class _Received(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ApproximateReceiveCount: str = "1"


class _MessageAttribute(BaseModel):
    model_config = ConfigDict(extra="ignore")

    stringValue: str | None = None


class SqsJobRecord(BaseModel, Generic[Job]):
    """The parts of an SQS record a worker reads; ``body`` is its job, parsed."""

    model_config = ConfigDict(extra="ignore")

    messageId: str
    receiptHandle: str = ""
    body: Job
    attributes: _Received = Field(default_factory=_Received)
    messageAttributes: dict[str, _MessageAttribute] = Field(default_factory=dict)


class SummaryJobRecord(SqsJobRecord[Json[SummaryJob]]):
    pass


class RepairJobRecord(SqsJobRecord[Json[RepairJob]]):
    pass


class ErasureJobRecord(SqsJobRecord[Json[ErasureWork]]):
    pass


class ForkCopyJobRecord(SqsJobRecord[Json[ForkCopyJob]]):
    pass
