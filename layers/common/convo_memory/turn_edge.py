"""A turn's way in, the same through every door.

Four doors run turns: predict, its streaming twin (buffered on the HttpApi, streamed on
the Function URL), the session's message route and the OpenAI-compatible chat
completions. A door only reads its request into a ``TurnCommand`` and frames the
``TurnResult``; what happens in between is here, once, and data flows one way:

1. the input gate (``gate``): the token's workspace first (401), then path ids, the
   ``Idempotency-Key`` header, the query and the body (400/404/413/422);
2. the door reads its request into a command (422, 404 for an id none of ours could be);
3. ``TurnEdge.serve``: the workspace's rate limit and its cap of slow turns in flight
   (429 with ``Retry-After``) before the turn or its key; then the turn, at most once
   per ``Idempotency-Key`` (a replay gets the kept ``TurnResult``), counted in the
   ``Turns`` metric by door and outcome, within its time budget (the HttpApi's or the
   streaming URL's), and among the workspace's slow turns past its first second; the
   serving path
   (``TurnService.serve``) finds the conversation (by id, by the app's own key, or none)
   and answers;
4. any failure, anywhere, becomes one status and error body (``error_for`` and
   ``error_response``): the contract's ``{"error": {"code", "message"}}``, with
   ``"type"`` added on the OpenAI-compatible door so that OpenAI's SDKs raise their
   usual exceptions.

Import-light: handlers import it at cold start; the container is built on first use.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from convo_memory import input_gate, observability
from convo_memory.domain.errors import (
    IdempotencyInProgress,
    InternalError,
    ServiceError,
    StoreUnavailable,
    Unavailable,
)
from convo_memory.time_budget import RECORDING_MARGIN_SECONDS, Countdown, TimeLeft

if TYPE_CHECKING:
    from convo_memory.bootstrap import Container
    from convo_memory.domain.turns import TurnCommand, TurnEvent, TurnResult, TurnSink

logger = logging.getLogger(__name__)
METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})

# -- errors: one mapping for every door ---------------------------------------------------

# The OpenAI-compatible door's ``type`` by status: what OpenAI's SDKs expect to see.
OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class ErrorReply:
    """A refusal as a door writes it: status, headers and the JSON body's text."""

    status: int
    headers: dict[str, str]
    body: str


def error_for(exc: BaseException, request_id: str) -> ServiceError:
    """The contract's error for any failure of a request: a domain error as it is; a
    store briefly unavailable as ``503 unavailable``; anything else ``500 internal``,
    logged with the request id its body names."""
    if isinstance(exc, ServiceError):
        return exc.in_request(request_id)
    if isinstance(exc, StoreUnavailable):
        logger.warning("store unavailable: %s", exc)
        return Unavailable().in_request(request_id)
    failure = InternalError(request_id)
    if misconfigured(exc):
        # Logged once, naming the variable, when the container failed to build.
        return failure
    logger.error(
        "unexpected %s (requestId %s)",
        type(exc).__name__,
        request_id,
        exc_info=exc,
        extra={"requestId": request_id},
    )
    return failure


def error_body(error: ServiceError, *, openai: bool = False) -> dict[str, Any]:
    """The error body: the contract's, plus on the OpenAI-compatible door ``type`` and,
    when the error names a field of the request, ``param`` (as OpenAI's errors do)."""
    body = error.to_body()
    if openai:
        body["error"]["type"] = OPENAI_ERROR_TYPES.get(error.status, "api_error")
        if error.param:
            body["error"]["param"] = error.param
    return body


def error_response(error: ServiceError, *, openai: bool = False) -> ErrorReply:
    """How every door answers a refusal or a failure (before a stream has started)."""
    headers = dict(error.headers())
    if openai and not retryable(error):
        # OpenAI's SDKs retry a 409 unless told not to: only a key still in use may be.
        headers["x-should-retry"] = "false"
    return ErrorReply(error.status, headers, json_text(error_body(error, openai=openai)))


def retryable(error: ServiceError) -> bool:
    """Whether the same request may succeed later (rate limits, busy keys, outages)."""
    return error.status == 429 or error.status >= 500 or isinstance(error, IdempotencyInProgress)


def json_text(value: Any) -> str:
    # Sorted keys: an idempotent replay (stored by Powertools, sorted) is byte-identical.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def misconfigured(exc: BaseException) -> bool:
    """Whether ``exc`` is the deployment's invalid configuration (``SettingsError``)."""
    # Imported here: config pulls in pydantic, which a handler's import must not pay for.
    from convo_memory.config import SettingsError

    return isinstance(exc, SettingsError)


# -- the input gate ------------------------------------------------------------------------


@dataclass(frozen=True)
class GatedRequest:
    """A request the input gate let through: the token's workspace (None on a route
    without the authorizer), its ``Idempotency-Key``, its body (None without one), and
    its route (``METHOD /path``: what an Idempotency-Key is scoped to)."""

    workspace_id: str | None
    idempotency_key: str | None
    body: dict[str, Any] | None
    route: str


def gate(
    *,
    method: str,
    route: str,
    headers: Mapping[str, str],
    query: Mapping[str, str] | None,
    body: bytes | str | None,
    workspace_id: str | None = None,
    path_ids: Mapping[str, str] | None = None,
    base64_encoded: bool = False,
) -> GatedRequest:
    """The input gate, in every door's order, once the door has found the token's
    workspace (401 first; None on a route without the authorizer): path ids, headers,
    query and body. ``route`` is the request's ``METHOD /path`` as the door names it."""
    for name, value in (path_ids or {}).items():
        input_gate.check_path_id(name, str(value))
    key = input_gate.idempotency_key(headers)
    input_gate.check_query(query)
    payload = None
    if method.upper() in METHODS_WITH_BODY:
        payload = input_gate.read_json_object(body, base64_encoded=base64_encoded)
    return GatedRequest(workspace_id, key, payload, route)


# -- the turn --------------------------------------------------------------------------------


class BufferedEvents(list["TurnEvent"]):
    """A turn's events kept in order (a ``TurnSink``), for a door that writes them once
    the turn is over: the HttpApi, which cannot stream."""

    def put(self, event: TurnEvent) -> None:
        self.append(event)


class TurnEdge:
    """What every door does around the serving path, once the door has read its request
    into a ``TurnCommand``: the workspace's rate limit, the Idempotency-Key, the turn's
    count and time budget. One per request: it knows how long the invocation has."""

    def __init__(
        self, container: Container, *, deadline_seconds: float, time_left: TimeLeft | None
    ) -> None:
        self._container = container
        self._deadline_seconds = deadline_seconds
        self._time_left = time_left

    @classmethod
    def behind_http_api(cls, container: Container, lambda_context: Any) -> TurnEdge:
        """A turn through the HttpApi: within the deployment's turn deadline (before API
        Gateway stops waiting) and the invocation's time."""
        has_clock = callable(getattr(lambda_context, "get_remaining_time_in_millis", None))
        return cls(
            container,
            deadline_seconds=container.settings.turn_deadline_seconds,
            time_left=lambda_context if has_clock else None,
        )

    @classmethod
    def on_stream_url(cls, container: Container) -> TurnEdge:
        """A turn through the streaming Function URL: within the streamed turn deadline;
        its Idempotency-Key's in-progress lock lasts as long as the turn may (not 24 h)."""
        deadline = container.settings.stream_turn_deadline_seconds
        countdown = Countdown(deadline + RECORDING_MARGIN_SECONDS)
        return cls(container, deadline_seconds=deadline, time_left=countdown)

    def serve(
        self,
        door: str,
        request: GatedRequest,
        command: TurnCommand,
        sink: TurnSink | None = None,
    ) -> TurnResult:
        """Serve ``command`` (a gated request's turn, through ``door``): refused over the
        workspace's rate limit or slow-turn cap (429), at most once per ``Idempotency-Key`` of the
        workspace (a retry with the same key and body gets the first result, the key
        being scoped to the request's route and body), counted in the ``Turns`` metric
        by door and outcome. ``sink`` hears the turn's events as they happen."""
        from convo_memory.domain.turns import TurnResult  # on first use: cold starts stay lean

        workspace_id = request.workspace_id
        assert workspace_id is not None  # every turn door is behind a workspace's token
        adapters = self._container.adapters
        adapters.turn_limiter.admit(workspace_id)
        runner = adapters.idempotency
        if request.idempotency_key is None or runner is None:
            return self._counted(door, workspace_id, command, sink, None)
        kept = runner.run(
            workspace_id=workspace_id,
            key=request.idempotency_key,
            route=request.route,
            body=request.body,
            compute=partial(self._kept, door, workspace_id, command, sink),
            time_left=self._time_left,
        )
        return TurnResult.from_json(kept)

    def _kept(
        self,
        door: str,
        workspace_id: str,
        command: TurnCommand,
        sink: TurnSink | None,
        idempotency_record: str,
    ) -> dict[str, Any]:
        """The turn, as its Idempotency-Key's record keeps it."""
        return self._counted(door, workspace_id, command, sink, idempotency_record).to_json()

    def _counted(
        self,
        door: str,
        workspace_id: str,
        command: TurnCommand,
        sink: TurnSink | None,
        idempotency_record: str | None,
    ) -> TurnResult:
        adapters = self._container.adapters
        turn = partial(
            self._container.turns.serve,
            workspace_id,
            command,
            sink,
            budget_seconds=self._budget(),
            idempotency_record=idempotency_record,
        )
        with observability.turn_count(adapters.metrics, door) as count:
            # Past its first second, the turn counts among the workspace's slow turns
            # (for at most the invocation's time left), or is refused there (429).
            result = adapters.turn_limiter.run(workspace_id, turn, self._seconds_left())
            return count.served(result)

    def _seconds_left(self) -> float | None:
        """The invocation's time left (None: no clock to read)."""
        if self._time_left is None:
            return None
        return self._time_left.get_remaining_time_in_millis() / 1000

    def _budget(self) -> float | None:
        """The turn's time: the door's deadline, or less when the invocation has less
        left (minus the time recording takes), so Lambda never kills a turn unrecorded.
        None without a clock to read: the serving path's own deadline."""
        left = self._seconds_left()
        if left is None:
            return None
        return max(0.0, min(self._deadline_seconds, left - RECORDING_MARGIN_SECONDS))
