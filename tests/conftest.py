"""The whole suite: modules run longest first, then tier by tier (tests/support/schedule.py),
so that ``make test``'s parallel workers finish together; and a test process stops the e2e
tier's shared runtime once it has run its last e2e test."""

from __future__ import annotations

import pytest

from tests.support.runtime_process import stop_shared_runtime
from tests.support.schedule import module_rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: a module's tests stay together and in their order.
    items.sort(key=lambda item: module_rank(item.nodeid.split("::", 1)[0]))


def _in_e2e(item: pytest.Item | None) -> bool:
    return item is not None and item.nodeid.startswith("tests/e2e/")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # After the item's own teardown (its module's fixtures included). The e2e modules
    # come first, so a process that leaves the tier does not come back to it.
    if _in_e2e(item) and not _in_e2e(nextitem):
        stop_shared_runtime()
