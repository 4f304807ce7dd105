"""Clocks a test moves instead of sleeping."""

from __future__ import annotations

import time


class ShiftedClock:
    """An injectable ``time.time`` that runs with the real one, plus whatever the test
    skipped ahead (``advance``): what waited out a real interval now takes no time,
    while real waits (an SQS delay, a poll) still count."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift

    def advance(self, seconds: float) -> None:
        self.shift += seconds
