"""Provider API keys, resolved server-side from where the operator keeps them.

A connection's ``apiKey`` names a Secrets Manager secret, an SSM SecureString parameter
or an environment variable. The value is read here, when a provider call needs it,
cached per container for ``ttl_seconds`` (so a rotated key is picked up within that
time), and handed only to the provider that sends it. It is never stored, returned or
logged: errors name the kind of reference and the AWS error code, never the value.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from convo_memory.domain.connections import ApiKeyRef
from convo_memory.domain.errors import ProviderError

logger = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 300.0
# (service name, region or None for the function's own) -> boto3 client
ClientFor = Callable[[str, "str | None"], Any]

_UNREADABLE = "Model provider error: the provider's API key could not be read."


class SecretResolver:
    """Reads and caches connection API keys; thread-safe; clients built on first use
    (``client_for``: the container's ``AwsClients.secrets``)."""

    def __init__(
        self,
        client_for: ClientFor,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._build_client = client_for
        self._clients: dict[tuple[str, str | None], Any] = {}
        self._ttl = ttl_seconds
        self._clock = clock
        self._environ = environ
        self._cache: dict[tuple[str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()

    def resolve(self, ref: ApiKeyRef) -> str:
        """The key ``ref`` points at; ``ProviderError`` when it cannot be read."""
        if ref.env is not None:
            # Read on every call: the process environment is already in memory.
            value = (os.environ if self._environ is None else self._environ).get(ref.env, "")
            if not value.strip():
                logger.warning("provider API key unavailable: its environment variable is unset")
                raise ProviderError(_UNREADABLE)
            return value.strip()
        key = (ref.source, ref.secret_arn or ref.parameter_name or "")
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] < self._ttl:
                return cached[1]
        value = self._fetch(ref)
        with self._lock:
            self._cache[key] = (now, value)
        return value

    def clear(self) -> None:
        """Forget every cached key: the next call reads it again."""
        with self._lock:
            self._cache.clear()

    def _client_for(self, service: str, region: str | None) -> Any:
        # One client per (service, region) per container, built on the first key read.
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                client = self._build_client(service, region)
                self._clients[(service, region)] = client
            return client

    def _fetch(self, ref: ApiKeyRef) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if ref.secret_arn is not None:
                region = ref.secret_arn.split(":")[3]
                response = self._client_for("secretsmanager", region).get_secret_value(
                    SecretId=ref.secret_arn
                )
                value = _secret_text(response)
            else:
                response = self._client_for("ssm", None).get_parameter(
                    Name=ref.parameter_name, WithDecryption=True
                )
                value = str(response["Parameter"]["Value"])
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "") or "UnknownError")
            logger.warning(
                "provider API key unreadable", extra={"keySource": ref.source, "errorCode": code}
            )
            raise ProviderError(_UNREADABLE) from None
        except BotoCoreError as exc:
            logger.warning(
                "provider API key unreadable",
                extra={"keySource": ref.source, "errorCode": type(exc).__name__},
            )
            raise ProviderError(_UNREADABLE) from None
        if not value.strip():
            logger.warning("provider API key is empty", extra={"keySource": ref.source})
            raise ProviderError(_UNREADABLE)
        return value.strip()


def _secret_text(response: Mapping[str, Any]) -> str:
    """The key in a secret: its SecretString, or the ``apiKey`` field when the string is
    a JSON object (the shape the Secrets Manager console suggests)."""
    text = response.get("SecretString")
    if text is None:
        binary = response.get("SecretBinary") or b""
        text = binary.decode("utf-8", errors="replace") if isinstance(binary, bytes) else ""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(document, dict) and isinstance(document.get("apiKey"), str):
            return str(document["apiKey"])
        return ""
    return text
