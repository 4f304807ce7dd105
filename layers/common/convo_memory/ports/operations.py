"""What the services ask of the running system: durable queues, asynchronous
invocations, metrics and the workspace's turn limits."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")


class QueuePort(Protocol):
    """A durable queue (SQS): ``send`` returns only once the queue has the message."""

    def send(self, body: dict[str, Any], delay_seconds: int = 0) -> None: ...


class AsyncInvokePort(Protocol):
    """An asynchronous invocation of a function (Lambda's ``InvocationType=Event``):
    ``invoke`` returns once Lambda has queued the event, which it then runs and retries
    on its own. Raises ``StoreUnavailable`` when Lambda did not take it."""

    def invoke(self, payload: dict[str, Any]) -> None: ...


class MetricsPort(Protocol):
    """Operational metrics (CloudWatch EMF on AWS). ``dimensions`` split a metric, e.g.
    ``count("Turns", door="predict", outcome="recorded")``."""

    def count(self, name: str, value: int = 1, **dimensions: str) -> None: ...
    def timing(self, name: str, milliseconds: float, **dimensions: str) -> None: ...


class NullMetrics:
    """Counts nothing: for services built without a metrics adapter."""

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        return None

    def timing(self, name: str, milliseconds: float, **dimensions: str) -> None:
        return None


# A workspace's slow turns in flight now (``TurnLimiter.turns_in_flight``): each by its
# entry, with the epoch second it stops counting at the latest; None when they are not
# tracked (the slow-turn cap is off).
TurnsInFlight = Callable[[str], "Mapping[str, float] | None"]


class TurnLimiter(Protocol):
    """Admits a workspace's next turn, or refuses it with ``RateLimited`` (429): over
    its rate, or with its cap of slow turns in flight. ``run`` runs an admitted turn:
    past its first second the turn counts as slow until it ends (``seconds_left``: the
    most it may still run, so that a turn killed mid-way stops counting then), or, when
    the workspace holds its cap of slow turns, it is given up there and ``RateLimited``
    raised."""

    def admit(self, workspace_id: str) -> None: ...
    def run(self, workspace_id: str, turn: Callable[[], _T], seconds_left: float | None) -> _T: ...
    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None: ...


class NoTurnLimit:
    """Admits every turn: the limits are off (0), or the services run over fakes."""

    def admit(self, workspace_id: str) -> None:
        return None

    def run(self, workspace_id: str, turn: Callable[[], _T], seconds_left: float | None) -> _T:
        return turn()

    def turns_in_flight(self, workspace_id: str) -> Mapping[str, float] | None:
        return None
