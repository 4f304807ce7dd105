"""The keyed names of end users' attachments: ``u`` + an HMAC-SHA256 of the externalRef
under the deployment's secret (the key that signs pagination cursors, under a label of
its own), so an object's key, an id and a record say nothing of who the end user is and
cannot be derived without the secret. Read on the first name a container needs."""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable

LABEL = b"convo-memory attachment owner v1\n"
# 96 bits, as hex: unique among a workspace's end users, short enough for an id.
OWNER_CHARS = 24


class HmacOwnerKeys:
    """Implements ``ports.OwnerKeys`` under the secret ``secret_source()`` returns."""

    def __init__(self, secret_source: Callable[[], bytes]) -> None:
        self._secret_source = secret_source
        self._secret: bytes | None = None
        self._lock = threading.Lock()

    def owner_of(self, external_ref: str) -> str:
        with self._lock:
            if self._secret is None:
                self._secret = self._secret_source()
        mac = hmac.new(self._secret, LABEL + external_ref.encode("utf-8"), hashlib.sha256)
        return "u" + mac.hexdigest()[:OWNER_CHARS]
