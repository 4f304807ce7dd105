"""bedrock-runtime clients, shared by the Bedrock provider and the guardrail filter.

One client per (region, timeout) per container, built on first use: importing this
module never imports boto3. A client's read timeout is the connection's (capped) timeout
and it makes at most two attempts, so a slow model cannot hold a turn for minutes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# (region or None for the function's own, read timeout in seconds or None) -> client
BedrockClientFactory = Callable[[str | None, float | None], Any]

CONNECT_TIMEOUT_SECONDS = 5.0
DEFAULT_READ_TIMEOUT_SECONDS = 25.0
# In total (one retry): botocore's ``max_attempts`` would count retries only.
MAX_ATTEMPTS = 2


class BedrockClients:
    """A thread-safe cache of bedrock-runtime clients keyed by (region, timeout)."""

    def __init__(self, build: Callable[[str | None, float], Any] | None = None) -> None:
        """``build(region, read_timeout)`` makes a client; the default uses boto3."""
        self._build = build or build_bedrock_runtime_client
        self._clients: dict[tuple[str | None, float], Any] = {}
        self._lock = threading.Lock()

    def __call__(self, region: str | None = None, timeout: float | None = None) -> Any:
        key = (region, float(timeout or DEFAULT_READ_TIMEOUT_SECONDS))
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._build(*key)
                self._clients[key] = client
            return client


def build_bedrock_runtime_client(region: str | None, read_timeout: float) -> Any:
    """A bedrock-runtime client with the connection's read timeout and two attempts.

    ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``) and the usual
    credential chain are honoured by boto3 itself."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=min(CONNECT_TIMEOUT_SECONDS, read_timeout),
        read_timeout=read_timeout,
        retries={"total_max_attempts": MAX_ATTEMPTS, "mode": "standard"},
    )
    # A session per client: boto3's default session is not thread-safe.
    session: Any = boto3.session.Session()
    return session.client("bedrock-runtime", region_name=region, config=config)


def client_factory_for(
    clients: BedrockClientFactory | None, region: str | None, timeout: float | None = None
) -> Callable[[], Any]:
    """A zero-argument builder for a provider or filter to call on first use."""
    make_client = clients or _default_clients()
    return lambda: make_client(region, timeout)


_default: BedrockClients | None = None
_default_lock = threading.Lock()


def _default_clients() -> BedrockClients:
    global _default
    with _default_lock:
        if _default is None:
            _default = BedrockClients()
        return _default
