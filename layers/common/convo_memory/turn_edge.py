"""A turn's way in, the same through every door.

Four doors run turns: predict, its streaming twin (buffered on the HttpApi, streamed on
the Function URL), the session's message route and the OpenAI-compatible chat
completions. They differ only in how they read a request and write the answer; what
happens in between is here, once:

1. the input gate (``gate``): the token's workspace first (401), then path ids, the
   ``Idempotency-Key`` header, the query and the body (400/404/413/422);
2. the door reads its request model (422), then the workspace's rate limit (``admit``,
   429 with ``Retry-After``), before the turn or its idempotency key;
3. which session (``serve_turn``): by id, by the app's own key (found or opened), or none;
4. the turn itself (``run``): at most once per ``Idempotency-Key``, counted in the
   ``Turns`` metric by door and outcome, within its time budget (``http_budget``,
   ``stream_budget``), and among the workspace's slow turns once past its first second;
5. any failure, anywhere, becomes one status and error body (``error_for`` and
   ``error_response``): the contract's ``{"error": {"code", "message"}}``, with
   ``"type"`` added on the OpenAI-compatible door so that OpenAI's SDKs raise their
   usual exceptions.

Import-light: handlers import it at cold start; the container is built on first use.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from convo_memory import input_gate, observability
from convo_memory.domain.errors import (
    IdempotencyInProgress,
    InternalError,
    ServiceError,
    SessionNotFound,
    StoreUnavailable,
    Unavailable,
)
from convo_memory.time_budget import RECORDING_MARGIN_SECONDS, Countdown

if TYPE_CHECKING:
    from convo_memory.bootstrap import Container
    from convo_memory.services.answering import DeltaSink
    from convo_memory.services.session_keys import SessionOwner
    from convo_memory.services.turns import ClientTurn, TurnOutcome

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
    """The error body: the contract's, plus ``type`` on the OpenAI-compatible door."""
    body = error.to_body()
    if openai:
        body["error"]["type"] = OPENAI_ERROR_TYPES.get(error.status, "api_error")
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
    without the authorizer), its ``Idempotency-Key`` and its body (None without one)."""

    workspace_id: str | None
    idempotency_key: str | None
    body: dict[str, Any] | None


def gate(
    *,
    method: str,
    headers: Mapping[str, str],
    query: Mapping[str, str] | None,
    body: bytes | str | None,
    workspace: Callable[[], str] | None = None,
    path_ids: Mapping[str, str] | None = None,
    base64_encoded: bool = False,
) -> GatedRequest:
    """The input gate, in every door's order: the token first (``workspace``, which
    raises 401), then path ids, headers, query and body."""
    workspace_id = workspace() if workspace is not None else None
    for name, value in (path_ids or {}).items():
        input_gate.check_path_id(name, str(value))
    key = input_gate.idempotency_key(headers)
    input_gate.check_query(query)
    payload = None
    if method.upper() in METHODS_WITH_BODY:
        payload = input_gate.read_json_object(body, base64_encoded=base64_encoded)
    return GatedRequest(workspace_id, key, payload)


# -- the turn --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionChoice:
    """Which conversation a turn belongs to: a session by id, the session of an app's
    own key (found or opened for ``owner``), or none (stateless)."""

    session_id: str | None = None
    session_key: str | None = None
    owner: SessionOwner | None = None


class TurnEdge:
    """What a door does with a gated request before, around and after the service."""

    def __init__(self, container: Container) -> None:
        self._container = container

    def admit(self, workspace_id: str) -> None:
        """Refuse the workspace's turn over its rate limit or its cap of slow turns in
        flight (``429 rate_limited`` with ``Retry-After``), after the input gate and
        before the turn or its key."""
        self._container.turn_limiter.admit(workspace_id)

    def run(
        self,
        *,
        door: str,
        route: str,
        request: GatedRequest,
        compute: Callable[[], dict[str, Any]],
        lambda_context: Any = None,
    ) -> dict[str, Any]:
        """``compute`` (one turn), counted by ``door`` and outcome, at most once per
        ``Idempotency-Key`` of the workspace (a retry with the same key and body gets the
        first result; the key is scoped to ``route`` and the body)."""

        def counted() -> dict[str, Any]:
            with self._slow_turn(request.workspace_id, lambda_context):
                return observability.counted_turn(self._container.metrics, door, compute)

        runner = self._container.idempotency
        if request.idempotency_key is None or runner is None or request.workspace_id is None:
            return counted()
        return runner.run(
            workspace_id=request.workspace_id,
            key=request.idempotency_key,
            route=route,
            body=request.body,
            compute=counted,
            lambda_context=lambda_context,
        )

    def _slow_turn(
        self, workspace_id: str | None, lambda_context: Any
    ) -> AbstractContextManager[None]:
        """Counts the turn among the workspace's slow turns past its first second, at
        most for the invocation's time left."""
        if workspace_id is None:
            return nullcontext()
        remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
        seconds_left = float(remaining()) / 1000 if callable(remaining) else None
        return self._container.turn_limiter.slow_turn(workspace_id, seconds_left)

    def http_budget(self, lambda_context: Any) -> float | None:
        """An HttpApi turn's time: the deployment's turn deadline, or less when the
        invocation has less left (minus the time recording takes), so Lambda never
        kills a turn unrecorded."""
        remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
        if not callable(remaining):
            return None
        left = float(remaining()) / 1000 - RECORDING_MARGIN_SECONDS
        return max(0.0, min(self._container.settings.turn_deadline_seconds, left))

    def stream_budget(self) -> tuple[float, Countdown]:
        """A streamed turn's time, and the countdown its idempotency key's in-progress
        lock lasts (as long as the turn may run, not 24 hours)."""
        budget = self._container.settings.stream_turn_deadline_seconds
        return budget, Countdown(budget + RECORDING_MARGIN_SECONDS)

    def serve_turn(
        self,
        workspace_id: str,
        capability_id: str,
        user_input: str,
        choice: SessionChoice,
        client: ClientTurn,
        *,
        sink: DeltaSink | None = None,
        budget_seconds: float | None = None,
        on_session: Callable[[str], None] | None = None,
    ) -> TurnOutcome:
        """One turn of ``choice``'s conversation through the serving path. A key's
        session is found or opened first (``on_session`` hears its id before the model
        is called); a key whose session was deleted meanwhile opens a new one."""
        turns = self._container.turns
        if choice.session_key is None:
            if choice.session_id is not None and on_session is not None:
                on_session(choice.session_id)
            return turns.turn(
                workspace_id,
                capability_id,
                user_input,
                choice.session_id,
                sink,
                budget_seconds=budget_seconds,
                client=client,
            )
        assert choice.owner is not None
        keys = self._container.session_keys
        keyed = replace(client, owner=choice.owner, history=())
        session_id = keys.resolve(workspace_id, capability_id, choice.session_key, choice.owner)
        for attempt in range(2):
            if on_session is not None:
                on_session(session_id)
            try:
                return turns.turn(
                    workspace_id,
                    capability_id,
                    user_input,
                    session_id,
                    sink,
                    budget_seconds=budget_seconds,
                    client=keyed,
                )
            except SessionNotFound:
                # Refused before the model was called: nothing was paid or recorded.
                if attempt:
                    raise
                session_id = keys.reopen(
                    workspace_id, capability_id, choice.session_key, choice.owner, session_id
                )
        raise AssertionError("unreachable")
