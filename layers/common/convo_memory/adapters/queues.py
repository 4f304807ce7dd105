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
        try:
            self._client.send_message(
                QueueUrl=self.url,
                MessageBody=json.dumps(body, separators=(",", ":")),
                DelaySeconds=delay_seconds,
            )
        except (ClientError, BotoCoreError) as exc:
            raise StoreUnavailable(f"SQS send failed: {exc}") from exc
