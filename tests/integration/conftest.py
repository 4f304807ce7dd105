from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.inprocess_api import InProcessApi, inprocess_stack, new_workspace


@dataclass
class Tenant:
    workspace_id: str
    token: str


@pytest.fixture
def api() -> Iterator[InProcessApi]:
    with inprocess_stack() as stack:
        yield stack


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "alpha"))


@pytest.fixture
def other_tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "beta"))
