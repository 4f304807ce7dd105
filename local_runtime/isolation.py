"""Per-thread request state for Powertools' HTTP resolvers.

Powertools keeps the request being resolved on the ``BaseRouter`` class
(``BaseRouter.current_event`` / ``BaseRouter.lambda_context``): right on Lambda, where an
execution environment serves one request at a time. The local runtime (and the in-process
test stack) runs many environments as threads of one process, so two concurrent requests
would read each other's event. ``isolate_resolver_state`` keeps that state per thread.
Nothing of it is deployed: the functions run unchanged on Lambda.
"""

from __future__ import annotations

import threading
from typing import Any

_installed = False
_lock = threading.Lock()


class _PerThread:
    """A data descriptor whose value belongs to the calling thread."""

    def __init__(self, name: str, store: threading.local) -> None:
        self.name = name
        self.store = store

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        try:
            return getattr(self.store, self.name)
        except AttributeError:
            raise AttributeError(self.name) from None

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(self.store, self.name, value)


def isolate_resolver_state() -> None:
    """Make ``BaseRouter.current_event`` and ``lambda_context`` per thread (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

        store = threading.local()
        names = ("current_event", "lambda_context")
        # Instance reads (``app.current_event``) find these in the class's own dict...
        for name in names:
            setattr(BaseRouter, name, _PerThread(name, store))
        # ...and class writes (``BaseRouter.current_event = ...``) reach the metaclass's.
        meta = type(
            "PerThreadRouterMeta",
            (type(BaseRouter),),
            {name: _PerThread(name, store) for name in names},
        )
        BaseRouter.__class__ = meta  # type: ignore[method-assign]
        _installed = True
