"""Signed, opaque pagination cursors (every ``nextToken``).

A cursor carries only a listing position (the last session's ``createdAt`` and id, or
the last message's seq): never a table key and never a workspace id. What it belongs to
(the listing, the workspace, the end user or the session) is bound into its MAC
instead, so a cursor replayed against another query, workspace or session fails
verification exactly like a forged or altered one: ``422 validation_error``.

    v1.<base64url(position JSON)>.<base64url(HMAC-SHA256(key, scope + position))>

The key is deployment configuration: ``CURSOR_SIGNING_KEY`` (the local runtime
generates one at start), else the Secrets Manager secret ``CURSOR_KEY_SECRET_ARN``,
fetched once per container.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from convo_memory.domain.errors import ValidationFailed

if TYPE_CHECKING:
    from convo_memory.config import Settings

VERSION = "v1"
MAX_CURSOR_CHARS = 1024
_DOMAIN = b"convo-memory nextToken v1\n"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


class CursorKeyUnavailable(RuntimeError):
    """The deployment's cursor key is not configured or cannot be read."""


class CursorCodec:
    """Issues and verifies cursors with one deployment key (read on first use)."""

    def __init__(self, key_source: Callable[[], bytes]) -> None:
        self._key_source = key_source
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def _signing_key(self) -> bytes:
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = self._key_source()
        return self._key

    def issue(self, position: dict[str, Any], scope: Sequence[str]) -> str:
        """A cursor for ``position`` that only verifies against the same ``scope``."""
        raw = json.dumps(position, separators=(",", ":"), sort_keys=True).encode()
        payload = _b64encode(raw)
        return f"{VERSION}.{payload}.{_b64encode(self._mac(payload, scope))}"

    def open(self, token: str | None, scope: Sequence[str]) -> dict[str, Any] | None:
        """The position ``token`` carries (``None`` for no token), or ``422`` when it is
        malformed, altered, forged, or was issued for another scope."""
        if not token:
            return None
        parts = token.split(".") if len(token) <= MAX_CURSOR_CHARS else []
        if len(parts) != 3 or parts[0] != VERSION:
            raise _refused()
        _, payload, signature = parts
        try:
            given = _b64decode(signature)
            expected = self._mac(payload, scope)
            if not hmac.compare_digest(given, expected):
                raise _refused()
            position = json.loads(_b64decode(payload))
        except (ValueError, binascii.Error):
            raise _refused() from None
        if not isinstance(position, dict):
            raise _refused()
        return position

    def _mac(self, payload: str, scope: Sequence[str]) -> bytes:
        # JSON keeps the scope's parts apart: ("a", "b.c") and ("a.b", "c") differ.
        message = _DOMAIN + json.dumps([list(scope), payload], separators=(",", ":")).encode()
        return hmac.new(self._signing_key(), message, hashlib.sha256).digest()


def _refused() -> ValidationFailed:
    return ValidationFailed("nextToken is not a token this API issued for this listing")


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _b64decode(text: str) -> bytes:
    if not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(raw) != text:  # unused low bits set: one spelling per token
        raise ValueError("not canonical base64url")
    return raw


def key_source(settings: Settings, secrets_client: Callable[[], Any]) -> Callable[[], bytes]:
    """Where the signing key comes from: ``CURSOR_SIGNING_KEY`` when set, else the
    secret ``CURSOR_KEY_SECRET_ARN`` (through ``secrets_client()``, called only then)."""

    def read() -> bytes:
        if settings.cursor_signing_key is not None:
            return settings.cursor_signing_key.get_secret_value().encode()
        if settings.cursor_key_secret_arn:
            return key_from_secret(secrets_client(), settings.cursor_key_secret_arn)
        raise CursorKeyUnavailable("no cursor key: set CURSOR_SIGNING_KEY or CURSOR_KEY_SECRET_ARN")

    return read


def key_from_secret(client: Any, secret_arn: str) -> bytes:
    """The key held by a Secrets Manager secret (its string, as the template generates it)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        secret = client.get_secret_value(SecretId=secret_arn)
    except (ClientError, BotoCoreError) as exc:
        raise CursorKeyUnavailable(f"cannot read the cursor key secret: {exc}") from exc
    value = secret.get("SecretString") or secret.get("SecretBinary")
    if not value or len(value) < 16:
        raise CursorKeyUnavailable("the cursor key secret is empty or shorter than 16")
    return value.encode() if isinstance(value, str) else bytes(value)
