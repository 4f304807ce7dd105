"""A turn's time budget, and the time an invocation has left (import-light: the
handlers read it at cold start).

An HttpApi turn must end before API Gateway stops waiting (30 s), a streamed one before
its Function URL's function does; either way it leaves itself ``RECORDING_MARGIN_SECONDS``
after its deadline to record the turn, or queue its repair, before the invocation ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, overload

RECORDING_MARGIN_SECONDS = 3.0


class TimeLeft(Protocol):
    """How long an invocation has left, as Lambda's context tells it (and as Powertools'
    idempotency reads it, to let a key's in-progress lock expire with the request)."""

    def get_remaining_time_in_millis(self) -> int: ...


class Countdown:
    """The time a streamed turn has left (a ``TimeLeft``): its Function URL's invocation
    outlives it, so the turn keeps its own clock."""

    def __init__(self, seconds: float) -> None:
        self._ends = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))


@overload
def time_left(lambda_context: Any, default: float) -> Callable[[], float]: ...


@overload
def time_left(lambda_context: Any, default: None = None) -> Callable[[], float] | None: ...


def time_left(lambda_context: Any, default: float | None = None) -> Callable[[], float] | None:
    """A handler's clock for the services: the seconds its invocation has left, read from
    the Lambda context at each call. A context without one (a test's, an asynchronous
    repair's replay) gives ``default`` seconds every time, or None (no limit)."""
    remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        return lambda: float(remaining()) / 1000
    if default is None:
        return None
    return lambda: default
