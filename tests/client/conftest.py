from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.fake_service import FakeService, iter_fake


@pytest.fixture
def service() -> Iterator[FakeService]:
    yield from iter_fake()
