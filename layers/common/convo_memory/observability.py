"""One observability module: the Powertools Logger every function and the layer's own
code write through (one service name, JSON, the request's correlation id), the
correlation id's trip from an API request into the SQS jobs it causes, and the metrics
of an invocation, written as one CloudWatch EMF record when it ends.

- Functions log with ``logger``; the layer's modules keep ``logging.getLogger(__name__)``
  and their records go through the same handler and formatter (``convo_memory.*`` is
  wired to it on import), so every line is structured JSON with the same keys.
- The correlation id is the API Gateway request id (``requestContext.requestId``) on the
  HTTP routes, the streaming door's own request id on the Function URL, and, in an SQS
  consumer, the ``correlationId`` message attribute the producer copied from its own
  request: one turn, its summary job and its repair share one id. It is kept per thread
  (the local runtime serves requests concurrently in one process).
- Metrics go through the services' metrics port, implemented here by ``metrics``
  (``InvocationMetrics``): what an invocation counts is kept and written as one EMF
  record by ``flush_metrics()``, which every door calls in a ``finally`` (the handler
  decorators below, the streaming door), so a failed invocation still counts. What is
  kept per request (the metrics, the correlation id, a turn's token tally) lives in the
  thread's context, so a turn run on a thread of its own in a copy of that context
  (``adapters/dynamo/slow_turn_watch.py``) counts into its request's record.
- Each line carries the function's name and request id, not its ARN, memory size or cold
  start (the log group and Lambda's REPORT line carry those), to keep lines short.
- Tracer is off by default (template parameter ``Tracing``): the serving path's own
  metrics explain more per dollar than empty traces.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger

if TYPE_CHECKING:
    from convo_memory.domain.turns import DoorId, TurnResult
    from convo_memory.ports import MetricsPort

SERVICE_NAME = "convo-memory"
CORRELATION_ATTRIBUTE = "correlationId"
_CORRELATION_KEY = "correlation_id"
_INVOCATION_KEYS = ("function_name", "function_request_id")
# Written at once when an invocation counts this many: below the 100 values a record may
# hold, at which Powertools would write a metric on its own.
MAX_SAMPLES = 99

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE_NAME)
# CloudWatch Logs stamps every event with its time (Logs Insights' @timestamp): a copy in
# each JSON line would be about 45 of a turn's log bytes, for nothing.
logger.remove_keys(["timestamp"])


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


# -- metrics -----------------------------------------------------------------------------

# (name, unit, value, dimensions)
Sample = tuple[str, str, float, tuple[tuple[str, str], ...]]


class InvocationMetrics:
    """The services' metrics port on CloudWatch EMF through Powertools: an invocation's
    metrics are kept (per thread: the local runtime serves invocations concurrently in
    one process) and written as one EMF record by ``flush``. Each metric keeps its own
    dimensions (one directive per set of them in the record); two metrics that give one
    dimension different values, or one metric with two sets, go to a record of their own."""

    def __init__(self, namespace: str | None = None) -> None:
        self._namespace = namespace
        # Per context: each thread starts with its own; a copy shares its list.
        self._kept: ContextVar[list[Sample] | None] = ContextVar("metric_samples", default=None)

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        self._add(name, "Count", value, dimensions)

    def timing(self, name: str, milliseconds: float, **dimensions: str) -> None:
        # A tenth of a millisecond is precision enough, and shorter in the log.
        self._add(name, "Milliseconds", round(milliseconds, 1), dimensions)

    def _samples(self) -> list[Sample]:
        samples = self._kept.get()
        if samples is None:
            samples = []
            self._kept.set(samples)
        return samples

    def open(self) -> None:
        """Keep this context's samples in a list that a copy of the context (a turn's
        own thread) shares."""
        self._samples()

    def _add(self, name: str, unit: str, value: float, dimensions: Mapping[str, str]) -> None:
        samples = self._samples()
        samples.append((name, unit, value, tuple((k, str(v)) for k, v in dimensions.items())))
        if len(samples) >= MAX_SAMPLES:
            self.flush()

    def flush(self) -> None:
        """Write what this thread's invocation counted (nothing when it counted nothing).
        Never raises: it runs in a ``finally``, after the answer is decided."""
        kept = self._samples()
        samples = list(kept)
        kept.clear()
        if not samples:
            return
        try:
            for record in emf_records(samples, self._namespace):
                print(json.dumps(record, separators=(",", ":")), flush=True)
        except Exception:
            logging.getLogger(__name__).warning("metrics not written", exc_info=True)


def emf_records(samples: list[Sample], namespace: str | None = None) -> list[dict[str, Any]]:
    """The EMF records of ``samples``: one per invocation unless two metrics disagree on
    a dimension. Powertools validates and serializes each set of dimensions; the sets
    then share records (``POWERTOOLS_METRICS_DISABLED`` writes none)."""
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

    if is_metrics_disabled():
        return []
    namespace = namespace or os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ConvoMemory"
    groups: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample[3], []).append(sample)
    records: list[dict[str, Any]] = []
    for dimensions, group in groups.items():
        provider = AmazonCloudWatchEMFProvider(namespace=namespace)
        for name, unit, value, _ in group:
            provider.add_metric(name=name, unit=unit, value=value)
        for key, dimension in dimensions:
            provider.add_dimension(name=key, value=dimension)
        part: dict[str, Any] = dict(provider.serialize_metric_set())
        home = next((record for record in records if _fits(record, part)), None)
        if home is None:
            records.append(part)
        else:
            home["_aws"]["CloudWatchMetrics"].extend(part["_aws"]["CloudWatchMetrics"])
            home.update((key, value) for key, value in part.items() if key != "_aws")
    return records


def _fits(record: Mapping[str, Any], part: Mapping[str, Any]) -> bool:
    """Whether ``part`` can join ``record``: the members they share are dimensions with
    the same value (a metric's values are a list, so a metric is never shared)."""
    return all(
        key not in record or (isinstance(value, str) and record[key] == value)
        for key, value in part.items()
        if key != "_aws"
    )


metrics = InvocationMetrics()


def flush_metrics() -> None:
    """Write this invocation's metrics as one EMF record (every door, in a ``finally``)."""
    metrics.flush()


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


_turn_tally: ContextVar[list[int] | None] = ContextVar("turn_tally", default=None)


def note_cached_tokens(cached_tokens: int) -> None:
    """Add the prompt tokens a model call read from the provider's prompt cache to the
    turn this thread is serving, for its log line; outside a turn, nothing."""
    tally = _turn_tally.get()
    if tally is not None:
        tally[0] += cached_tokens


def turn_outcome(result: TurnResult) -> str:
    """How a served turn ended, for the ``Turns`` metric (``paused``: it waits for the
    app's own tools, v4; nothing is due to be recorded yet)."""
    if result.withheld:
        return "withheld"
    if result.session_id is None:
        return "stateless"
    if result.tool_calls:
        return "paused"
    return "recorded" if result.recorded else "not_recorded"


class TurnCount:
    """What ``turn_count`` counts of one turn that was served."""

    def __init__(self, metrics: MetricsPort, door: DoorId, tally: list[int]) -> None:
        self._metrics = metrics
        self._door = door
        self._tally = tally

    def served(self, result: TurnResult) -> TurnResult:
        """Count ``result`` and write the turn's line; ``result`` again."""
        outcome = turn_outcome(result)
        self._metrics.count("Turns", 1, door=self._door, outcome=outcome)
        # One line per turn: with the correlation id, it ties the turn to its SQS jobs.
        _turn_line(
            "turn served",
            door=self._door,
            outcome=outcome,
            sessionId=result.session_id,
            runId=result.run_id,
            cachedTokens=self._tally[0] or None,
        )
        return result


@contextmanager
def turn_count(metrics: MetricsPort, door: DoorId) -> Iterator[TurnCount]:
    """One turn through ``door``, counted in the ``Turns`` metric by door and outcome:
    how it ended (``TurnCount.served``), or an error's contract code (``internal`` for
    any other failure). When the provider read part of the prompt from its cache, the
    turn's line says how many tokens (``cachedTokens``; the prompt's are in the
    ``ModelInputTokens`` metric)."""
    tally = [0]
    token = _turn_tally.set(tally)
    if isinstance(metrics, InvocationMetrics):
        metrics.open()  # the turn's own thread counts into this request's record
    try:
        yield TurnCount(metrics, door, tally)
    except Exception as exc:
        outcome = str(getattr(exc, "code", "")) or "internal"
        metrics.count("Turns", 1, door=door, outcome=outcome)
        _turn_line("turn failed", door=door, outcome=outcome)
        raise
    finally:
        _turn_tally.reset(token)


def _turn_line(message: str, **fields: Any) -> None:
    """The line every turn writes, without ``location``: it would always name this
    module (a key set to None is left out of the line)."""
    logger.thread_safe_append_keys(location=None)
    try:
        logger.info(message, extra=fields)
    finally:
        logger.thread_safe_remove_keys(["location"])


Handler = TypeVar("Handler", bound=Callable[..., Any])


def _begin_invocation(context: Any, correlation: str | None) -> None:
    logger.thread_safe_append_keys(
        function_name=getattr(context, "function_name", None),
        function_request_id=getattr(context, "aws_request_id", None),
    )
    set_correlation_id(correlation)


def _end_invocation() -> None:
    flush_metrics()
    logger.thread_safe_remove_keys([*_INVOCATION_KEYS, _CORRELATION_KEY])


def http_handler(handler: Handler) -> Handler:
    """Decorate an HTTP API Lambda handler: the function's name and request id in every
    log line, the API request's id as the correlation id, and one metrics record."""

    @wraps(handler)
    def wrapped(event: Any, context: Any) -> Any:
        _begin_invocation(context, http_request_id(event))
        try:
            return handler(event, context)
        finally:
            _end_invocation()

    return wrapped  # type: ignore[return-value]


def job_handler(handler: Handler) -> Handler:
    """Decorate a Lambda handler that is not an HTTP route (SQS consumers set each
    record's correlation id themselves; a schedule gets the invocation's)."""

    @wraps(handler)
    def wrapped(event: Any, context: Any) -> Any:
        _begin_invocation(context, getattr(context, "aws_request_id", None))
        try:
            return handler(event, context)
        finally:
            _end_invocation()

    return wrapped  # type: ignore[return-value]
