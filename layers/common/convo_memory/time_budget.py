"""A turn's time budget (import-light: the handlers read it at cold start).

An HttpApi turn must end before API Gateway stops waiting (30 s), a streamed one before
its Function URL's function does; either way it leaves itself ``RECORDING_MARGIN_SECONDS``
after its deadline to record the turn, or queue its repair, before the invocation ends.
"""

from __future__ import annotations

import time

RECORDING_MARGIN_SECONDS = 3.0


class Countdown:
    """What Powertools' idempotency asks of a Lambda context: the time left, here of a
    streamed turn (so that a key's in-progress lock expires with the turn)."""

    def __init__(self, seconds: float) -> None:
        self._ends = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))
