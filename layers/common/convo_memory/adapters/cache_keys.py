"""Prompt-cache routing keys (OpenAI's ``prompt_cache_key``): one per conversation.

A provider routes a request to a cache machine by its prompt's prefix and this key, so
that requests sharing a long prefix land where that prefix is cached. Every turn of a
conversation (``Prompt.lineage``) carries the same key; different conversations carry
different ones. The key names neither the session nor the workspace: it is an
HMAC-SHA256 of the lineage under a deployment secret the operator already owns (the key
that signs pagination cursors), under a label of its own, so a key says nothing and no
cursor signature can be derived from it. The secret is read on the first key a
container needs (never by a function that sends none); while it cannot be read, requests
go without a key (the turn never fails for it).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

LABEL = b"convo-memory prompt_cache_key v1\n"
# 128 bits, as hex: well within the field's 64 characters.
KEY_CHARS = 32
# After the secret could not be read, requests go without a key this long before the
# next attempt (no read on every turn while Secrets Manager refuses).
RETRY_AFTER_SECONDS = 300.0


class PromptCacheKeys:
    """Keys for lineages, under the secret ``secret_source()`` returns (read once)."""

    def __init__(
        self,
        secret_source: Callable[[], bytes],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret_source = secret_source
        self._monotonic = monotonic
        self._secret: bytes | None = None
        self._failed_at: float | None = None
        self._lock = threading.Lock()

    def key(self, lineage: str) -> str | None:
        """The routing key of ``lineage``; None while the secret cannot be read."""
        secret = self._read_secret()
        if secret is None:
            return None
        mac = hmac.new(secret, LABEL + lineage.encode("utf-8"), hashlib.sha256)
        return mac.hexdigest()[:KEY_CHARS]

    def _read_secret(self) -> bytes | None:
        if self._secret is not None:
            return self._secret
        with self._lock:
            now = self._monotonic()
            if self._secret is None and (
                self._failed_at is None or now - self._failed_at >= RETRY_AFTER_SECONDS
            ):
                try:
                    self._secret = self._secret_source()
                    self._failed_at = None
                except Exception as exc:  # the turn goes on without a key
                    self._failed_at = now
                    logger.warning("no prompt_cache_key: %s", type(exc).__name__)
            return self._secret
