"""Asynchronous Lambda invocations (``InvocationType=Event``): the transcript repair's
second durable path, apart from SQS. Lambda keeps the event in its own internal queue,
retries a failed run (the function's ``EventInvokeConfig``) and sends an event it could
not run to the function's on-failure destination."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from convo_memory.domain.errors import StoreUnavailable


class LambdaAsyncInvoke:
    """Invokes ``function_name``; its client is built on first use (a serving function
    whose writes never fail never builds one)."""

    def __init__(self, client: Callable[[], Any], function_name: str) -> None:
        self._make_client = client
        self._client: Any = None
        self._lock = threading.Lock()
        self.function_name = function_name

    def _lambda(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def invoke(self, payload: dict[str, Any]) -> None:
        """Queue ``payload`` for the function; raises ``StoreUnavailable`` when Lambda
        did not accept it (anything but 202)."""
        try:
            out = self._lambda().invoke(
                FunctionName=self.function_name,
                InvocationType="Event",
                Payload=json.dumps(payload, separators=(",", ":")).encode("utf-8"),
            )
        except (ClientError, BotoCoreError) as exc:
            raise StoreUnavailable(f"Lambda did not take the event: {exc}") from exc
        status = out.get("StatusCode")
        if status != 202:
            raise StoreUnavailable(f"Lambda answered {status} to an asynchronous invocation")
