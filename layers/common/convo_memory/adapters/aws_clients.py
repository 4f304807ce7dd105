"""Every boto3 client of the layer, built in one place: ``AwsClients``.

One client per (service, region, patience) per container, built on first use: importing
this module never imports boto3. Each client has short timeouts and a bounded number of
attempts, so a slow dependency cannot hold a turn for minutes; a bedrock-runtime
client's read timeout is the connection's (capped) timeout. Clients given to
``AwsClients`` (tests: moto, botocore's Stubber) stand in for the built ones of their
service, whatever the region or patience asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Patience:
    """How long a client waits for a connection and an answer, and how often it tries
    (in total: botocore's ``max_attempts`` would count the retries only)."""

    connect_timeout: float
    read_timeout: float
    attempts: int


# Tables, queues, KMS and the cursor key: short timeouts, standard retries.
DEFAULT_PATIENCE = Patience(connect_timeout=2, read_timeout=10, attempts=4)
# Provider API keys (Secrets Manager, SSM): read on a turn's path, so one retry only.
SECRETS_PATIENCE = Patience(connect_timeout=2, read_timeout=5, attempts=2)
CONNECT_TIMEOUT_SECONDS = 5.0
DEFAULT_READ_TIMEOUT_SECONDS = 25.0
# A model call: one retry at most.
MAX_ATTEMPTS = 2

# (service, region or None for the function's own, patience) -> client
ClientBuilder = Callable[[str, "str | None", Patience], Any]
# (region or None for the function's own, read timeout in seconds or None) -> client
BedrockClientFactory = Callable[[str | None, float | None], Any]


def build_client(service: str, region: str | None, patience: Patience) -> Any:
    """A boto3 client with ``patience``'s timeouts and standard retries.

    ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``) and the usual credential
    chain are honoured by boto3 itself."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=patience.connect_timeout,
        read_timeout=patience.read_timeout,
        retries={"total_max_attempts": patience.attempts, "mode": "standard"},
        # Presigned links (attachments) signed with SigV4, as every region takes.
        signature_version="s3v4" if service == "s3" else None,
    )
    # A session per client (boto3's default session is not thread-safe), all reading
    # from one loader: a session of its own would read the endpoint rules and the
    # service's model from disk again (about 67 ms of CPU a client, of 77).
    session: Any = boto3.session.Session(botocore_session=_botocore_session())
    return session.client(service, region_name=region, config=config)


def _botocore_session() -> Any:
    """A new botocore session over the process's one data loader (sharing it is safe:
    the loader only caches what it has read)."""
    import botocore.session

    session = botocore.session.Session()
    session.register_component("data_loader", _data_loader())
    return session


@cache
def _data_loader() -> Any:
    """The process's botocore data loader: a first session's, configured as any is."""
    import botocore.session

    return botocore.session.Session().get_component("data_loader")


class AwsClients:
    """The container's boto3 clients: a thread-safe cache keyed by (service, region,
    patience), filled on first use."""

    def __init__(
        self, given: Mapping[str, Any] | None = None, *, build: ClientBuilder = build_client
    ) -> None:
        """``given`` maps service names to ready clients; ``build`` makes the others."""
        self._given = dict(given or {})
        self._build = build
        self._clients: dict[tuple[str, str | None, Patience], Any] = {}
        self._lock = threading.Lock()

    def client(
        self, service: str, region: str | None = None, patience: Patience = DEFAULT_PATIENCE
    ) -> Any:
        """The client of ``service`` (in ``region``, else the function's own)."""
        given = self._given.get(service)
        if given is not None:
            return given
        key = (service, region, patience)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._build(service, region, patience)
                self._clients[key] = client
            return client

    def __getitem__(self, service: str) -> Any:
        """``clients["dynamodb"]``: the service's client in the function's region."""
        return self.client(service)

    def bedrock_runtime(self, region: str | None = None, timeout: float | None = None) -> Any:
        """A bedrock-runtime client with ``timeout`` as its read timeout and two attempts
        (a ``BedrockClientFactory``, shared by the Bedrock provider and the guardrail)."""
        read = float(timeout or DEFAULT_READ_TIMEOUT_SECONDS)
        patience = Patience(min(CONNECT_TIMEOUT_SECONDS, read), read, MAX_ATTEMPTS)
        return self.client("bedrock-runtime", region, patience)

    def secrets(self, service: str, region: str | None) -> Any:
        """A ``secretsmanager`` or ``ssm`` client for reading a provider's API key."""
        return self.client(service, region, SECRETS_PATIENCE)


def client_factory_for(
    clients: BedrockClientFactory | None, region: str | None, timeout: float | None = None
) -> Callable[[], Any]:
    """A zero-argument builder for a provider or filter to call on first use, over the
    process's clients (``AwsClients.bedrock_runtime``, which the container passes)."""
    if clients is None:
        raise ValueError("a Bedrock provider or guardrail needs the process's Bedrock clients")
    return lambda: clients(region, timeout)
