"""Lambda's asynchronous invocations (``InvocationType=Event``), emulated.

Like the Lambda service: an event is queued, run in a free environment, run again after
a delay when the function fails (``EventInvokeConfig.MaximumRetryAttempts``, default 2;
Lambda waits about one minute, then two), and, when every attempt failed, sent to the
function's on-failure destination (an SQS queue: the template's
``DestinationConfig.OnFailure``) as Lambda's invocation record, whose
``requestPayload`` is the event. An event whose destination cannot be reached either is
dropped and counted (``dropped``), as Lambda's ``AsyncEventsDropped`` metric would.

``run_due`` runs what is due at a given time (tests drive it with their own clock);
``start`` runs it in a background thread for ``make run``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from local_runtime.handlers import FunctionRegistry, function_arn

RETRY_DELAYS_SECONDS = (60.0, 120.0)
DEFAULT_RETRIES = 2
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class AsyncConfig:
    """One function's ``EventInvokeConfig``."""

    retries: int = DEFAULT_RETRIES
    on_failure_queue_url: str | None = None


def async_invoke_configs(
    template: Mapping[str, Any], queue_urls: Mapping[str, str]
) -> dict[str, AsyncConfig]:
    """Each function's ``EventInvokeConfig`` in ``template``, its SQS destination
    resolved to the local queue URL (``!GetAtt Queue.Arn`` -> ``queue_urls[Queue]``)."""
    configs: dict[str, AsyncConfig] = {}
    for name, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        config = (resource.get("Properties") or {}).get("EventInvokeConfig")
        if not isinstance(config, Mapping):
            continue
        on_failure = ((config.get("DestinationConfig") or {}).get("OnFailure")) or {}
        url = None
        target = on_failure.get("Destination")
        if on_failure.get("Type") == "SQS" and isinstance(target, Mapping):
            get_att = target.get("Fn::GetAtt")
            logical = get_att[0] if isinstance(get_att, list) else str(get_att).split(".")[0]
            url = queue_urls.get(logical)
        configs[name] = AsyncConfig(int(config.get("MaximumRetryAttempts", DEFAULT_RETRIES)), url)
    return configs


@dataclass(order=True)
class _Pending:
    due: float
    order: int
    name: str = field(compare=False)
    event: Any = field(compare=False)
    request_id: str = field(compare=False)
    attempts: int = field(default=0, compare=False)


class AsyncEvents:
    """The queue of asynchronous invocations of one registry's functions."""

    def __init__(
        self,
        registry: FunctionRegistry,
        configs: Mapping[str, AsyncConfig],
        sqs: Callable[[], Any],
        clock: Callable[[], float] = time.time,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_SECONDS,
    ) -> None:
        self._registry = registry
        self._configs = dict(configs)
        self._sqs = sqs
        self._clock = clock
        self._delays = retry_delays
        self._pending: list[_Pending] = []
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.succeeded = 0
        self.sent_to_destination = 0
        self.dropped: list[Any] = []

    def submit(self, name: str, event: Any, request_id: str | None = None) -> None:
        """Queue ``event`` for ``name`` (what Lambda does before answering 202)."""
        entry = _Pending(self._clock(), next(self._order), name, event, request_id or "")
        entry.request_id = entry.request_id or str(uuid.uuid4())
        with self._lock:
            heapq.heappush(self._pending, entry)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def run_due(self) -> int:
        """Run every event due by now (retries scheduled meanwhile wait); how many ran."""
        ran = 0
        now = self._clock()
        while True:
            with self._lock:
                if not self._pending or self._pending[0].due > now:
                    return ran
                entry = heapq.heappop(self._pending)
            self._run(entry)
            ran += 1

    def _run(self, entry: _Pending) -> None:
        entry.attempts += 1
        try:
            self._registry.invoke(entry.name, entry.event, entry.request_id)
        except Exception as exc:
            config = self._configs.get(entry.name, AsyncConfig())
            if entry.attempts <= config.retries:
                delay = self._delays[min(entry.attempts, len(self._delays)) - 1]
                entry.due = self._clock() + delay
                with self._lock:
                    heapq.heappush(self._pending, entry)
                return
            self._give_up(entry, config, exc)
            return
        self.succeeded += 1

    def _give_up(self, entry: _Pending, config: AsyncConfig, error: Exception) -> None:
        if config.on_failure_queue_url:
            record = {
                "version": "1.0",
                "timestamp": datetime.now(UTC).isoformat(),
                "requestContext": {
                    "requestId": entry.request_id,
                    "functionArn": f"{function_arn(entry.name)}:$LATEST",
                    "condition": "RetriesExhausted",
                    "approximateInvokeCount": entry.attempts,
                },
                "requestPayload": entry.event,
                "responseContext": {
                    "statusCode": 200,
                    "executedVersion": "$LATEST",
                    "functionError": "Unhandled",
                },
                "responsePayload": {"errorMessage": str(error), "errorType": type(error).__name__},
            }
            try:
                self._sqs().send_message(
                    QueueUrl=config.on_failure_queue_url, MessageBody=json.dumps(record)
                )
                self.sent_to_destination += 1
                return
            except Exception:
                _report(f"{entry.name}: the on-failure destination did not take the event")
        _report(f"{entry.name}: asynchronous event dropped after {entry.attempts} attempts")
        self.dropped.append(entry.event)

    # -- make run ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="async-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.wait(POLL_SECONDS):
            try:
                self.run_due()
            except Exception:
                _report("running asynchronous invocations failed")


def _report(what: str) -> None:
    print(f"[local_runtime] {what}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
