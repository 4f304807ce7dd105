"""The e2e tier: ``python -m local_runtime`` as a subprocess, spoken to over HTTP.

``local_runtime`` is one runtime for the tier in each test process (dev token and a second
workspace "other" known in advance; spare workspaces and a fake model connection that
``shared_runtime_on`` lends to a module), and ``client`` the Python client on it. ``start_runtime``
starts extra ones with their own environment (e.g.
``start_runtime({"CONVO_SUMMARIZER_FAIL": "1"})``); each is stopped with SIGINT at
teardown and must exit 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from convo_memory_client import Conversations
from tests.support.runtime_process import (
    RuntimeProcess,
    StartRuntime,
    launch_runtime,
    shared_runtime,
)


@pytest.fixture(scope="module")
def local_runtime() -> RuntimeProcess:
    """The shared runtime: ``CONVO_DEV_TOKEN`` = DEV_TOKEN, workspace "other" = OTHER_TOKEN.
    One per test process, stopped (and checked) when the process leaves the e2e tier
    (tests/conftest.py)."""
    return shared_runtime()


@pytest.fixture
def start_runtime() -> Iterator[StartRuntime]:
    """Start a runtime of the test's own: ``start_runtime({"SOME_ENV": "1"})``."""
    started: list[RuntimeProcess] = []

    def start(extra_env: Mapping[str, str] | None = None) -> RuntimeProcess:
        runtime = launch_runtime(extra_env)
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        if runtime.process.poll() is None:
            runtime.assert_stopped_cleanly()


@pytest.fixture
def client(local_runtime: RuntimeProcess) -> Conversations:
    """The Python client on the shared runtime, with the dev workspace's token."""
    return Conversations(local_runtime.base_url, local_runtime.tokens["dev"], timeout=30)
