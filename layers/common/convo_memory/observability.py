"""One observability module: the Powertools Logger every function and the layer's own
code write through (one service name, JSON, the request's correlation id), and the
correlation id's trip from an API request into the SQS jobs it causes.

- Functions log with ``logger``; the layer's modules keep ``logging.getLogger(__name__)``
  and their records go through the same handler and formatter (``convo_memory.*`` is
  wired to it on import), so every line is structured JSON with the same keys.
- The correlation id is the API Gateway request id (``requestContext.requestId``) on the
  HTTP routes, the streaming door's own request id on the Function URL, and, in an SQS
  consumer, the ``correlationId`` message attribute the producer copied from its own
  request: one turn, its summary job and its repair share one id. It is kept per thread
  (the local runtime serves requests concurrently in one process).
- Metrics go through the services' metrics port (``adapters.metrics``), Tracer is off by
  default (template parameter ``Tracing``): the serving path's own metrics explain more
  per dollar than empty traces.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger

if TYPE_CHECKING:
    from convo_memory.ports import MetricsPort

SERVICE_NAME = "convo-memory"
CORRELATION_ATTRIBUTE = "correlationId"
_CORRELATION_KEY = "correlation_id"

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE_NAME)


def _route_library_logs() -> None:
    """Send ``convo_memory.*`` records through the Powertools handler (JSON, same keys,
    the function's log level) instead of the bare root logger."""
    library = logging.getLogger("convo_memory")
    handler = logger.registered_handler
    if handler not in library.handlers:
        library.handlers = [handler]
    library.setLevel(logger.log_level)
    library.propagate = False


_route_library_logs()


def set_correlation_id(value: str | None) -> str:
    """Make ``value`` (or a fresh id) this thread's correlation id; returns it."""
    correlation = value or str(uuid.uuid4())
    logger.thread_safe_append_keys(**{_CORRELATION_KEY: correlation})
    return correlation


def correlation_id() -> str | None:
    """This thread's correlation id, if one is set."""
    value = logger.thread_safe_get_current_keys().get(_CORRELATION_KEY)
    return str(value) if value else None


def clear_correlation_id() -> None:
    logger.thread_safe_remove_keys([_CORRELATION_KEY])


def http_request_id(event: Mapping[str, Any]) -> str | None:
    """API Gateway's id of an HTTP API request (payload 2.0)."""
    context = event.get("requestContext") if isinstance(event, Mapping) else None
    value = context.get("requestId") if isinstance(context, Mapping) else None
    return str(value) if value else None


def record_correlation_id(record: Any) -> str | None:
    """The correlation id an SQS record carries (its ``correlationId`` attribute), from
    the event's dict, Powertools' ``SQSRecord`` or a parsed ``SqsRecordModel``."""
    parsed = getattr(record, "messageAttributes", None)
    if isinstance(parsed, Mapping):  # a parsed model: attribute models by name
        value = getattr(parsed.get(CORRELATION_ATTRIBUTE), "stringValue", None)
        return str(value) if value else None
    raw = getattr(record, "raw_event", record)
    attributes = raw.get("messageAttributes") if isinstance(raw, Mapping) else None
    attribute = attributes.get(CORRELATION_ATTRIBUTE) if isinstance(attributes, Mapping) else None
    value = attribute.get("stringValue") if isinstance(attribute, Mapping) else None
    return str(value) if value else None


def turn_outcome(result: Mapping[str, Any]) -> str:
    """How a served turn ended, for the ``Turns`` metric."""
    if result.get("withheld"):
        return "withheld"
    if result.get("sessionId") is None:
        return "stateless"
    return "recorded" if result.get("recorded") else "not_recorded"


def counted_turn(
    metrics: MetricsPort, door: str, compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``compute`` (one turn through ``door``), counted in the ``Turns`` metric by door
    and outcome (how it ended, an error's contract code, or ``internal``)."""
    try:
        result = compute()
    except Exception as exc:
        outcome = str(getattr(exc, "code", "")) or "internal"
        metrics.count("Turns", 1, door=door, outcome=outcome)
        logger.info("turn failed", extra={"door": door, "outcome": outcome})
        raise
    outcome = turn_outcome(result)
    metrics.count("Turns", 1, door=door, outcome=outcome)
    # One line per turn: with the correlation id, it ties the turn to its SQS jobs.
    logger.info(
        "turn served",
        extra={
            "door": door,
            "outcome": outcome,
            "sessionId": result.get("sessionId"),
            "runId": result.get("runId"),
        },
    )
    return result


Handler = TypeVar("Handler", bound=Callable[..., Any])


def http_handler(handler: Handler) -> Handler:
    """Decorate an HTTP API Lambda handler: Lambda context in every log line, and the
    request's id as the correlation id."""

    @logger.inject_lambda_context
    @wraps(handler)
    def wrapped(event: Any, context: Any) -> Any:
        set_correlation_id(http_request_id(event))
        try:
            return handler(event, context)
        finally:
            clear_correlation_id()

    return wrapped  # type: ignore[return-value]


def job_handler(handler: Handler) -> Handler:
    """Decorate a Lambda handler that is not an HTTP route (SQS consumers set each
    record's correlation id themselves; a schedule gets the invocation's)."""

    @logger.inject_lambda_context
    @wraps(handler)
    def wrapped(event: Any, context: Any) -> Any:
        set_correlation_id(getattr(context, "aws_request_id", None))
        try:
            return handler(event, context)
        finally:
            clear_correlation_id()

    return wrapped  # type: ignore[return-value]
