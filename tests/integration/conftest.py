"""The in-process stack for integration tests.

One moto backend per module (``module_backend``: the template's tables, queues and
keys), built once; each test gets it with empty queues (``backend``), a container of its
own over it (``api``: fresh clients and caches) and a workspace of its own (``tenant``). Tables keep what earlier
tests of the module wrote, so a test reads what it wrote through its own workspace, or
compares counts before and after. A module whose tests read the whole backend (a
retention run, a scan of every item) takes ``pytestmark = pytest.mark.fresh_stack``:
each of its tests then gets a backend of its own. A test that needs other settings
builds its container with ``serving(backend, env)``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.inprocess_api import (
    AwsBackend,
    InProcessApi,
    aws_backend,
    inprocess_stack,
    new_workspace,
    serving,
)
from tests.support.tenants import Tenant


@pytest.fixture(scope="module")
def module_backend() -> Iterator[AwsBackend]:
    with aws_backend() as backend:
        yield backend


@pytest.fixture
def backend(module_backend: AwsBackend) -> AwsBackend:
    """The module's backend, its queues emptied for this test."""
    module_backend.empty_queues()
    return module_backend


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[InProcessApi]:
    if request.node.get_closest_marker("fresh_stack"):
        with inprocess_stack() as stack:
            yield stack
        return
    with serving(request.getfixturevalue("backend")) as stack:
        yield stack


@pytest.fixture
def tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "alpha"))


@pytest.fixture
def other_tenant(api: InProcessApi) -> Tenant:
    return Tenant(*new_workspace(api, "beta"))
