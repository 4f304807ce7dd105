"""Fakes of every port, for the unit tier (see ``stores`` and ``adapters``)."""

from tests.fakes.adapters import (
    FakeClock,
    FakeContentFilter,
    FakeMetrics,
    FakeProvider,
    FakeQueue,
)
from tests.fakes.stores import FakeDatabase

__all__ = [
    "FakeClock",
    "FakeContentFilter",
    "FakeDatabase",
    "FakeMetrics",
    "FakeProvider",
    "FakeQueue",
]
