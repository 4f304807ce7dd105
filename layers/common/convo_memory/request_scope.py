"""What a door knows about the request it is serving that the serving path records with
the turn, without every door passing it through every call: the idempotency record of
the request's ``Idempotency-Key``, set by ``adapters.idempotency`` around the turn.

A context variable: one per request (per thread, and per task), so concurrent requests
served by one process never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_IDEMPOTENCY_RECORD: ContextVar[str | None] = ContextVar("idempotency_record", default=None)


def idempotency_record() -> str | None:
    """The id of the idempotency record guarding the current request, if it has one."""
    return _IDEMPOTENCY_RECORD.get()


@contextmanager
def guarded_by(record_id: str) -> Iterator[None]:
    """Within this block, the current request is guarded by idempotency record ``record_id``."""
    token = _IDEMPOTENCY_RECORD.set(record_id)
    try:
        yield
    finally:
        _IDEMPOTENCY_RECORD.reset(token)
