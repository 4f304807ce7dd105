"""The whole suite: modules run longest first, then tier by tier (tests/support/schedule.py),
so that ``make test``'s parallel workers finish together."""

from __future__ import annotations

import pytest

from tests.support.schedule import module_rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: a module's tests stay together and in their order.
    items.sort(key=lambda item: module_rank(item.nodeid.split("::", 1)[0]))
