"""``python -m local_runtime`` as a subprocess, spoken to over HTTP: starting one on free
ports (bounded wait for "Ready."), its output, requests to it, stopping it. The e2e
tier's fixtures (tests/e2e/conftest.py) and tests use these."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, ModelSwitchboard

REPO = Path(__file__).resolve().parents[2]
DEV_TOKEN = "e2e-dev-token-0123456789abcdef"
OTHER_TOKEN = "e2e-other-token-0123456789abcdef"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
REQUEST_TIMEOUT_SECONDS = 30.0

StartRuntime = Callable[..., "RuntimeProcess"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RuntimeProcess:
    """One ``python -m local_runtime`` and what it printed."""

    process: subprocess.Popen[str]
    base_url: str
    lambda_url: str
    tokens: dict[str, str]
    stdout_lines: list[str] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    _readers: list[threading.Thread] = field(default_factory=list)

    # output ---------------------------------------------------------------

    def _drain(self, stream: Any, lines: list[str], watch_ready: bool) -> None:
        # Always drained: a full pipe would block the runtime mid-request.
        for line in stream:
            lines.append(line.rstrip("\n"))
            if watch_ready and line.strip() == "Ready.":
                self.ready.set()

    def start_readers(self) -> None:
        for stream, lines, watch in (
            (self.process.stdout, self.stdout_lines, True),
            (self.process.stderr, self.stderr_lines, False),
        ):
            reader = threading.Thread(target=self._drain, args=(stream, lines, watch), daemon=True)
            reader.start()
            self._readers.append(reader)

    @property
    def stdout(self) -> str:
        return "\n".join(self.stdout_lines)

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    @property
    def aws_endpoint(self) -> str:
        """The moto server the runtime started (from its banner)."""
        for line in self.stdout_lines:
            if line.strip().startswith("AWS "):
                return line.split()[1]
        raise AssertionError(f"no AWS endpoint in the banner:\n{self.stdout}")

    # HTTP -----------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        raw_body: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        base_url: str | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """(status, lower-cased headers, body parsed as JSON when it is JSON)."""
        return http_call(
            (base_url or self.base_url) + path,
            method,
            token=token,
            json_body=json,
            raw_body=raw_body,
            headers=headers,
        )

    # lifecycle ------------------------------------------------------------

    def stop(self, sig: int = signal.SIGINT) -> int:
        """Signal the runtime and wait (bounded) for it to exit; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_SECONDS)
        for reader in self._readers:
            reader.join(5)
        return int(self.process.returncode)

    def assert_stopped_cleanly(self, sig: int = signal.SIGINT) -> None:
        code = self.stop(sig)
        shutdown = self.stderr.split("shutting down", 1)[-1]
        assert code == 0, f"exit code {code}\nstderr:\n{self.stderr}"
        assert "Traceback" not in shutdown, f"traceback at shutdown:\n{self.stderr}"


def http_call(
    url: str,
    method: str = "GET",
    *,
    token: str | None = None,
    json_body: Any = None,
    raw_body: bytes | str | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    data: bytes | None = None
    all_headers = dict(headers or {})
    if json_body is not None:
        data = json.dumps(json_body).encode("utf-8")
        all_headers.setdefault("content-type", "application/json")
    elif raw_body is not None:
        data = raw_body.encode("utf-8") if isinstance(raw_body, str) else raw_body
    if token is not None:
        all_headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method.upper(), headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
            status, raw_headers, payload = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, raw_headers, payload = error.code, error.headers, error.read()
    response_headers = {name.lower(): value for name, value in raw_headers.items()}
    return status, response_headers, _parse(payload)


def _parse(payload: bytes) -> Any:
    if not payload:
        return None
    text = payload.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def launch_runtime(extra_env: Mapping[str, str] | None = None) -> RuntimeProcess:
    """Start ``python -m local_runtime`` on free ports and wait (bounded) for "Ready."."""
    port = free_port()
    lambda_port = free_port()
    while lambda_port == port:
        lambda_port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_ENDPOINT_URL") and key not in ("PORT", "LAMBDA_PORT")
    }
    env.update(
        {
            "PORT": str(port),
            "LAMBDA_PORT": str(lambda_port),
            "CONVO_DEV_TOKEN": DEV_TOKEN,
            "CONVO_DEV_TOKENS": f"other={OTHER_TOKEN}",
            # The tier fires bursts (16 concurrent turns on one workspace) from a loaded
            # machine; the turn limit itself is tested in tests/integration/test_turn_limits.py.
            "CONVO_WORKSPACE_TURNS_PER_SECOND": "1000",
            "CONVO_WORKSPACE_TURN_BURST": "1000",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra_env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "local_runtime"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    runtime = RuntimeProcess(
        process=process,
        base_url=f"http://127.0.0.1:{env['PORT']}",
        lambda_url=f"http://127.0.0.1:{env['LAMBDA_PORT']}",
        tokens={"dev": env["CONVO_DEV_TOKEN"], "other": OTHER_TOKEN},
    )
    runtime.start_readers()
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not runtime.ready.wait(0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            runtime.stop(signal.SIGKILL)
            pytest.fail(
                f"local runtime not ready (exit code {process.returncode})\n"
                f"stdout:\n{runtime.stdout}\nstderr:\n{runtime.stderr}"
            )
    return runtime


# The e2e tier's shared runtime in this test process (none until a test asks for it), the
# fake model server its connection ``fake`` calls, and how many spare workspaces are taken.
_shared: list[RuntimeProcess] = []
_switchboard: list[ModelSwitchboard] = []
_outage_dir: list[Path] = []
_spares_taken: list[int] = [0]
# Workspaces the shared runtime knows beyond ``ws-dev`` and "other", each lent to one
# module for good (``shared_runtime_on``): what it stores is seen by no other module.
SPARE_WORKSPACES = 8
# The shared runtime's switches: each fails its part while its file exists.
SUMMARIZER_DOWN = "summarizer-down"
TURN_WRITES_DOWN = "turn-writes-down"


def spare_token(index: int) -> str:
    return f"e2e-spare-{index}-token-0123456789abcdef"


def shared_runtime() -> RuntimeProcess:
    """The runtime the e2e tier's modules share (``local_runtime``), started on first use:
    dev token DEV_TOKEN, workspace "other" OTHER_TOKEN, SPARE_WORKSPACES more, a
    provider connection ``fake`` to this process's ``ModelSwitchboard``, an embedded
    summarizer that fails while ``shared_summarizer_outage()`` exists, and turn writes
    that fail while ``shared_turn_writes_outage()`` does."""
    if not _shared:
        board = ModelSwitchboard()
        board.start()
        _switchboard.append(board)
        _outage_dir.append(Path(tempfile.mkdtemp(prefix="e2e-shared-runtime-")))
        connections = {"fake": {"type": "openai", "baseUrl": board.base_url, "models": ["fake-*"]}}
        spares = (f"spare-{n}={spare_token(n)}" for n in range(SPARE_WORKSPACES))
        _shared.append(
            launch_runtime(
                {
                    "CONVO_DEV_TOKENS": ",".join([f"other={OTHER_TOKEN}", *spares]),
                    "CONVO_PROVIDER_CONNECTIONS": json.dumps(connections),
                    "CONVO_SUMMARIZER_FAIL_WHILE": str(_outage_dir[0] / SUMMARIZER_DOWN),
                    "LOCAL_TURN_WRITES_FAIL_WHILE": str(_outage_dir[0] / TURN_WRITES_DOWN),
                    "no_proxy": "127.0.0.1,localhost",
                }
            )
        )
    return _shared[0]


def shared_summarizer_outage() -> Path:
    """The file whose existence makes the shared runtime's embedded summarizer fail
    (``CONVO_SUMMARIZER_FAIL_WHILE``); absent unless a test writes it."""
    shared_runtime()
    return _outage_dir[0] / SUMMARIZER_DOWN


def shared_turn_writes_outage() -> Path:
    """The file whose existence makes the shared runtime's turn writes fail
    (``LOCAL_TURN_WRITES_FAIL_WHILE``); absent unless a test writes it."""
    shared_runtime()
    return _outage_dir[0] / TURN_WRITES_DOWN


def lend_workspace() -> str:
    """The token of a spare workspace of the shared runtime that no other module uses."""
    return spare_token(_lend())


def _lend() -> int:
    shared_runtime()
    lent = _spares_taken[0]
    assert lent < SPARE_WORKSPACES, "every spare workspace is lent already"
    _spares_taken[0] += 1
    return lent


def lent_model_id(model: FakeOpenAIServer) -> str:
    """The model id under which ``shared_runtime_on`` plugged ``model`` in."""
    return _switchboard[0].model_id_of(model)


def stop_shared_runtime() -> None:
    """Stop the shared runtime, if one runs, and check it stopped cleanly. The suite does
    this when a test process moves on from the e2e tier (tests/conftest.py): an idle
    runtime still polls its queues. A later use starts another."""
    while _shared:
        _shared.pop().assert_stopped_cleanly()
    while _switchboard:
        _switchboard.pop().stop()
    while _outage_dir:
        shutil.rmtree(_outage_dir.pop(), ignore_errors=True)


@dataclass
class FakeModelStack:
    """What an e2e module on a fake model shares: the runtime, the fake model server
    (``tests.fakes.openai_server.FakeOpenAIServer``), the capability on it and the token
    of the workspace it is in."""

    runtime: RuntimeProcess
    model: Any
    capability: str
    token: str

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible doors' base URL."""
        return self.runtime.base_url + "/v1"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """A request with the workspace's token that must succeed (2xx): its JSON payload."""
        status, _, payload = self.runtime.call(method, path, token=self.token, json=body)
        assert 200 <= status < 300, (status, payload)
        return payload


@contextmanager
def shared_runtime_on(
    model: FakeOpenAIServer,
    *capability_names: str,
    more: Sequence[tuple[str, FakeOpenAIServer]] = (),
) -> Iterator[tuple[RuntimeProcess, str, list[str]]]:
    """The shared runtime with ``model`` (never started itself) answering its connection
    ``fake`` under a model id of its own, and a workspace no other module uses, with a
    generative capability on that model for each name, then one for each (name, model)
    of ``more``: (runtime, the workspace's token, the capabilities' ids, in order). A
    runtime of the module's own would cost about 2 s of CPU to start and warm up."""
    runtime = shared_runtime()
    lent = _lend()
    token = spare_token(lent)
    model_id = f"fake-spare-{lent}-0"
    plugged = {model_id: model}
    named = [(name, model_id) for name in capability_names]
    for n, (name, other) in enumerate(more, start=1):
        plugged[f"fake-spare-{lent}-{n}"] = other
        named.append((name, f"fake-spare-{lent}-{n}"))
    with _switchboard[0].plug(plugged):
        yield runtime, token, fake_capabilities(runtime, token, named)


@contextmanager
def runtime_on_fake_model(
    model_base_url: str, *capability_names: str
) -> Iterator[tuple[RuntimeProcess, list[str]]]:
    """A runtime of its own whose provider connection ``fake`` is a fake OpenAI-compatible
    server (``model_base_url``), with a generative capability on it for each name (their
    ids, in order), stopped cleanly at the end: for a module that reads the whole
    runtime's tables or bucket (else ``shared_runtime_on`` costs less)."""
    connections = {"fake": {"type": "openai", "baseUrl": model_base_url, "models": ["fake-*"]}}
    runtime = launch_runtime(
        {"CONVO_PROVIDER_CONNECTIONS": json.dumps(connections), "no_proxy": "127.0.0.1,localhost"}
    )
    try:
        named = [(name, "fake-chat") for name in capability_names]
        yield runtime, fake_capabilities(runtime, DEV_TOKEN, named)
    finally:
        runtime.assert_stopped_cleanly()


def fake_capabilities(
    runtime: RuntimeProcess, token: str, named: Sequence[tuple[str, str]]
) -> list[str]:
    """A generative capability on the connection ``fake`` for each (name, model id), in
    the workspace of ``token``: their ids, in order."""
    ids = []
    for name, model_id in named:
        provider = {"connection": "fake", "modelId": model_id}
        body = {"name": name, "kind": "generative", "provider": provider}
        status, _, created = runtime.call("POST", "/v1/capabilities", token=token, json=body)
        assert status == 201, created
        ids.append(str(created["id"]))
    return ids
