"""A turn watched for its first second: the slow-turn cap that holds for bursts.

The turn runs on a thread of its own (in a copy of the request's context: its logger
keys, its metrics, its turn tally), and the request's thread waits for it. A turn that
ends within its first second is a fast turn: nothing more happens (no write). At the
first second the request's thread registers the turn among its workspace's slow turns
(``SlowTurns.register``, one conditional write):

- registered: it waits for the turn to end, then removes the entry;
- refused (the workspace holds its cap of slow turns): the turn is given up
  (``domain.turn_abandonment``) and the request answers ``429 rate_limited`` at once. A
  stream that has begun ends with an error event carrying ``rate_limited`` (the door
  writes the error it gets). The turn's thread may still be inside a model or tool call
  that cannot be interrupted; it stops at its next chunk, step or write, and writes
  nothing: no message, no trace, no pause. On Lambda the environment is free for the
  next request as soon as the handler returns; the given-up thread finishes in the
  background of a later one (its model or tool call bounded by the turn's deadline).
- a turn that had begun writing what it made when the refusal came is left to end (it
  is ending), uncounted: the "+2" the contract allows covers such stragglers.

So at no moment does a workspace hold more than its cap of turns that have run past
their first second, however many start together.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from convo_memory.domain.turn_abandonment import Abandonment, TurnAbandoned, run_abandonable

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# ``first_second(done, seconds)``: True when ``done`` is set within ``seconds`` (the turn
# was fast), False when the time passed first.
FirstSecond = Callable[[threading.Event, float], bool]


class Placement(Protocol):
    """A registration among the workspace's slow turns (``slow_turns.Registration``)."""

    @property
    def refused(self) -> bool: ...


_P = TypeVar("_P", bound=Placement)


class SlowTurnPlaces(Protocol[_P]):
    """What the watch asks of the slow-turn sets (``slow_turns.SlowTurns``)."""

    @property
    def after_seconds(self) -> float: ...
    def new_entry(self, seconds_left: float | None) -> str: ...
    def register(self, workspace_id: str, entry: str) -> _P: ...
    def release(self, workspace_id: str, registration: _P) -> None: ...
    def refuse(self, workspace_id: str) -> None: ...


def wait_first_second(done: threading.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for the turn to end."""
    return done.wait(seconds)


class TurnThread(Generic[_T]):
    """``turn`` on a daemon thread, in a copy of the caller's context, under
    ``abandonment``; ``done`` is set when it has returned or raised."""

    def __init__(self, turn: Callable[[], _T], abandonment: Abandonment) -> None:
        self.done = threading.Event()
        self._turn = turn
        self._abandonment = abandonment
        self._result: _T | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(self._run,), name="turn", daemon=True).start()

    def _run(self) -> None:
        try:
            self._result = run_abandonable(self._abandonment, self._turn)
        except TurnAbandoned:
            logger.info("a turn given up at its first second stopped, nothing written")
        except BaseException as exc:
            self._error = exc
        finally:
            self.done.set()

    def outcome(self) -> _T:
        """The turn's result, or its error raised again (once it is done)."""
        self.done.wait()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


def run_watched(
    slow: SlowTurnPlaces[_P],
    workspace_id: str,
    turn: Callable[[], _T],
    seconds_left: float | None,
    first_second: FirstSecond = wait_first_second,
) -> _T:
    """Run ``turn`` (a turn of ``workspace_id`` with at most ``seconds_left`` to go);
    past its first second it counts among the workspace's slow turns, or it is given up
    and ``RateLimited`` raised (see the module docstring)."""
    abandonment = Abandonment()
    worker = TurnThread(turn, abandonment)
    if first_second(worker.done, slow.after_seconds):
        return worker.outcome()
    registration = slow.register(workspace_id, slow.new_entry(seconds_left))
    if registration.refused and abandonment.abandon():
        slow.refuse(workspace_id)
    try:
        return worker.outcome()
    finally:
        slow.release(workspace_id, registration)
