"""A turn's way in, the same through every door.

Five doors run turns: predict (and its streaming twin, buffered on the HttpApi and
streamed on the Function URL), the session's message route, and the OpenAI-compatible
chat completions and Responses. A door only reads its request into a ``TurnCommand``
and frames the ``TurnResult``; what happens in between is here, once, and data flows
one way:

1. the input gate (``input_gate.gate``): the token's workspace first (401), then path
   ids, the ``Idempotency-Key`` header, the query and the body (400/404/413/422);
2. the door reads its request into a command (422, 404 for an id none of ours could be);
3. ``TurnEdge.serve``: the workspace's rate limit and its cap of slow turns in flight
   (429 with ``Retry-After``) before the turn or its key; then the turn, at most once
   per ``Idempotency-Key`` (a replay gets the kept ``TurnResult``), counted in the
   ``Turns`` metric by door and outcome, within its time budget (the HttpApi's or the
   streaming URL's), and among the workspace's slow turns past its first second; the
   serving path (``TurnService.serve``) finds the conversation (by id, by the app's own
   key, or none) and answers;
4. any failure, anywhere, becomes one status and error body (``edge.errors``).

Import-light: handlers import it at cold start; the container is built on first use.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from convo_memory import observability
from convo_memory.domain.time_budget import RECORDING_MARGIN_SECONDS, Countdown, TimeLeft

if TYPE_CHECKING:
    from convo_memory.bootstrap import Container
    from convo_memory.domain.turns import DoorId, TurnCommand, TurnEvent, TurnResult, TurnSink
    from convo_memory.edge.input_gate import GatedRequest


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
        door: DoorId,
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
        runner = self._container.infrastructure.idempotency
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
        door: DoorId,
        workspace_id: str,
        command: TurnCommand,
        sink: TurnSink | None,
        idempotency_record: str,
    ) -> dict[str, Any]:
        """The turn, as its Idempotency-Key's record keeps it."""
        return self._counted(door, workspace_id, command, sink, idempotency_record).to_json()

    def _counted(
        self,
        door: DoorId,
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
