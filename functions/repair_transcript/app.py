"""RepairQueue consumer: lands turns whose transcript write failed on the request path."""

from __future__ import annotations

import json
from typing import Any

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

# Report every failed record, even when all failed, rather than failing the invocation.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def repair_record(record: SQSRecord) -> None:
    from convo_memory.bootstrap import get_container

    set_correlation_id(record_correlation_id(record) or record.message_id)
    body = json.loads(record.body)
    outcome = get_container().recorder.repair(body)
    logger.info(
        "transcript repair",
        extra={
            "outcome": outcome,
            "messageId": record.message_id,
            "sessionId": body.get("sessionId"),
        },
    )


@job_handler
def handler(event: dict[str, Any], context: Any) -> Any:
    return process_partial_response(
        event=event, record_handler=repair_record, processor=processor, context=context
    )
