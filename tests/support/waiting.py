"""Waiting for something asynchronous (a queue consumer, a log line) in a test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    """``condition()``'s first truthy value, asked every ``every`` seconds; fails the
    test, naming ``what``, once ``timeout`` seconds have gone by."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)
