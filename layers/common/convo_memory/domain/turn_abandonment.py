"""A turn given up while it runs: refused over its workspace's cap of slow turns at its
first second (``adapters/dynamo/slow_turn_watch.py``). Its request is answered ``429`` at
once; the turn's own thread may still be inside a model or tool call that cannot be
interrupted, so it stops at its next check instead, and nothing of it is written:

- ``check_not_abandoned`` stops a given-up turn between streamed chunks and between the
  steps of its tool loop (it raises ``TurnAbandoned``);
- ``before_writing`` comes before the turn's first write after the model (its run
  trace, its record, its pause): a given-up turn stops there, and a turn past it can no
  longer be given up (it is ending: the refusal lets it finish instead).

The abandonment travels in the turn's context (a ``ContextVar``), set by the thread that
runs the turn; outside such a thread (every unit test, the cap off) nothing is checked.

A turn given up after it opened a session (a key's first call, a Responses conversation
or a fork at an older response) removes what it opened: a refused turn opens nothing.
The sessions a turn opens are noted (``note_opened``) in its context too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

_T = TypeVar("_T")


class TurnAbandoned(BaseException):
    """The turn was given up: its thread unwinds without writing anything. A
    ``BaseException``, like a cancellation: no ``except Exception`` on the way (a model
    error handler, a best-effort write) may swallow it and carry on."""


class Abandonment:
    """Whether a turn was given up, and whether it still may be."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._writing = False

    def abandon(self) -> bool:
        """Give the turn up, unless it has begun writing what it made (then False: it
        is ending, and is left to end)."""
        with self._lock:
            if self._writing:
                return False
            self._abandoned = True
            return True

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def check(self) -> None:
        """Raise ``TurnAbandoned`` when the turn was given up."""
        if self._abandoned:
            raise TurnAbandoned

    def begin_writing(self) -> None:
        """The turn is about to write: raise when it was given up, else it no longer
        can be."""
        with self._lock:
            if self._abandoned:
                raise TurnAbandoned
            self._writing = True


_current: ContextVar[Abandonment | None] = ContextVar("turn_abandonment", default=None)


def run_abandonable(abandonment: Abandonment, work: Callable[[], _T]) -> _T:
    """Run ``work`` (a turn) in the current context under ``abandonment``."""
    token = _current.set(abandonment)
    try:
        return work()
    finally:
        _current.reset(token)


def check_not_abandoned() -> None:
    """Stop here (``TurnAbandoned``) when the turn this thread runs was given up."""
    abandonment = _current.get()
    if abandonment is not None:
        abandonment.check()


def before_writing() -> None:
    """Before the turn's first write after the model: stop when it was given up; past
    this point it no longer can be."""
    abandonment = _current.get()
    if abandonment is not None:
        abandonment.begin_writing()


_opened: ContextVar[list[str] | None] = ContextVar("sessions_opened_by_turn", default=None)


@contextmanager
def sessions_opened() -> Iterator[list[str]]:
    """The ids of the sessions opened while this block runs (a turn), in order."""
    opened: list[str] = []
    token = _opened.set(opened)
    try:
        yield opened
    finally:
        _opened.reset(token)


def note_opened(session_id: str) -> None:
    """A session was opened for the turn this context runs (nothing outside a turn)."""
    opened = _opened.get()
    if opened is not None:
        opened.append(session_id)
