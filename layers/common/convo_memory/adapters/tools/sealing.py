"""Webhook signing secrets, encrypted with a KMS key of the stack.

Encrypted rather than hashed: the service must sign every webhook call with the secret
itself (HMAC), so it has to get the plaintext back, which a hash cannot give. The
ciphertext is bound to an encryption context naming the workspace and the capability:
a ciphertext copied into another capability does not decrypt, and IAM only lets the
functions use the key with such a context. Each container decrypts a capability's
secret once and keeps it (``SigningSecrets``).
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from convo_memory.domain.errors import StoreUnavailable
from convo_memory.domain.models import tool_secret_context
from convo_memory.ports import SecretSealer

logger = logging.getLogger(__name__)

# KMS error codes worth retrying later (the request itself was fine).
_TRANSIENT = frozenset(
    {
        "ThrottlingException",
        "KMSInternalException",
        "DependencyTimeoutException",
        "KeyUnavailableException",
        "LimitExceededException",
        "ServiceUnavailable",
    }
)


class SealerError(RuntimeError):
    """The secret could not be sealed or opened for good (wrong key, wrong context,
    access denied, no key configured)."""


class KmsSealer:
    """``ports.SecretSealer`` on AWS KMS (``Encrypt`` / ``Decrypt`` with a context)."""

    def __init__(self, client_factory: Callable[[], Any], key_id: str) -> None:
        self._client_factory = client_factory
        self._client: Any = None
        self.key_id = key_id

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def seal(self, plaintext: str, context: Mapping[str, str]) -> str:
        response = self._call(
            "encrypt",
            KeyId=self.key_id,
            Plaintext=plaintext.encode("utf-8"),
            EncryptionContext=dict(context),
        )
        return base64.b64encode(response["CiphertextBlob"]).decode("ascii")

    def open(self, ciphertext: str, context: Mapping[str, str]) -> str:
        response = self._call(
            "decrypt",
            KeyId=self.key_id,
            CiphertextBlob=base64.b64decode(ciphertext),
            EncryptionContext=dict(context),
        )
        plaintext: bytes = response["Plaintext"]
        return plaintext.decode("utf-8")

    def _call(self, operation: str, **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(**params)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            logger.warning("KMS %s failed: %s", operation, code)
            if code in _TRANSIENT:
                raise StoreUnavailable(f"KMS {operation}: {code}") from exc
            raise SealerError(f"KMS {operation} failed ({code or 'unknown error'})") from exc
        except BotoCoreError as exc:
            logger.warning("KMS %s failed: %s", operation, type(exc).__name__)
            raise StoreUnavailable(f"KMS {operation}: {type(exc).__name__}") from exc


class NoSealer:
    """The deployment has no key for tool secrets: webhook tools cannot be created."""

    def seal(self, plaintext: str, context: Mapping[str, str]) -> str:
        raise SealerError("no KMS key is configured for tool signing secrets (TOOL_SECRET_KEY_ID)")

    def open(self, ciphertext: str, context: Mapping[str, str]) -> str:
        raise SealerError("no KMS key is configured for tool signing secrets (TOOL_SECRET_KEY_ID)")


class SigningSecrets:
    """Decrypted signing secrets, once per container per capability (bounded, LRU)."""

    def __init__(self, sealer: SecretSealer, max_entries: int = 1024) -> None:
        self._sealer = sealer
        self._max = max_entries
        self._cache: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, workspace_id: str, capability_id: str, ciphertext: str) -> str:
        key = (workspace_id, capability_id, ciphertext)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        secret = self._sealer.open(ciphertext, tool_secret_context(workspace_id, capability_id))
        with self._lock:
            self._cache[key] = secret
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return secret
