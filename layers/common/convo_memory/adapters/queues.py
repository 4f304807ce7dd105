"""SQS queues (summary trigger, transcript repair)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from convo_memory.domain.errors import StoreUnavailable


class SqsQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self.url = queue_url

    def send(self, body: dict[str, Any], delay_seconds: int = 0) -> None:
        """Send ``body``; the sender's correlation id travels as a message attribute, so
        the job's logs carry the id of the request that caused it."""
        from convo_memory.observability import CORRELATION_ATTRIBUTE, correlation_id

        attributes: dict[str, Any] = {}
        correlation = correlation_id()
        if correlation:
            attributes[CORRELATION_ATTRIBUTE] = {"DataType": "String", "StringValue": correlation}
        try:
            self._client.send_message(
                QueueUrl=self.url,
                MessageBody=json.dumps(body, separators=(",", ":")),
                DelaySeconds=delay_seconds,
                MessageAttributes=attributes,
            )
        except (ClientError, BotoCoreError) as exc:
            raise StoreUnavailable(f"SQS send failed: {exc}") from exc

    def redeliver_after(self, receipt_handle: str, seconds: int) -> None:
        """Make a received message visible again after ``seconds`` (instead of the
        queue's visibility timeout), so that failing its record retries it soon: the
        same message, no new one."""
        try:
            self._client.change_message_visibility(
                QueueUrl=self.url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
            )
        except (ClientError, BotoCoreError) as exc:
            raise StoreUnavailable(f"SQS visibility change failed: {exc}") from exc
