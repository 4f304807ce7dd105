"""The unit tier runs in memory: a test that starts a process or opens a connection fails
at that call, whatever it imported (tests/unit/test_test_tiers.py checks the imports).
Such a test belongs to tests/integration (moto) or tests/e2e (processes, sockets)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"a unit test {what}: it belongs to tests/integration or tests/e2e "
            "(see tests/unit/test_test_tiers.py)"
        )

    return refuse


@pytest.fixture(autouse=True)
def in_memory_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No process and no connection during a unit test (a bound socket no one calls,
    such as the local gateway's, is no connection)."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))
    monkeypatch.setattr(os, "system", _refuse("started a process"))
    monkeypatch.setattr(socket.socket, "connect", _refuse("opened a connection"))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse("opened a connection"))
    yield
