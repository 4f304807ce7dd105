"""The token check: which workspace a bearer token belongs to.

Tokens are stored only as SHA-256 hashes; the authorizer and the streaming door resolve
a token through ``TokenResolver``, which caches the answer for a short time.
"""

from __future__ import annotations

import hashlib
import hmac

from convo_memory.ports import TokenStore


def hash_token(token: str) -> str:
    """Tokens are stored only as SHA-256 hashes (they are high-entropy secrets, so a
    fast hash is enough; look-ups are by hash, so no comparison leaks timing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_match(token: str, stored_hash: str) -> bool:
    """Whether ``token`` is the one ``stored_hash`` was made from (in constant time)."""
    return hmac.compare_digest(hash_token(token), stored_hash)


class TokenResolver:
    """Bearer token -> workspace id, cached per warm container for a short time.
    Unknown tokens are cached too (briefly), so a flood of bad tokens costs no reads."""

    def __init__(self, store: TokenStore, ttl_seconds: float = 30) -> None:
        import time

        self._store = store
        self._ttl = ttl_seconds
        self._clock = time.monotonic
        self._cache: dict[str, tuple[float, str | None]] = {}

    def workspace_for(self, token: str) -> str | None:
        if not token:
            return None
        digest = hash_token(token)
        cached = self._cache.get(digest)
        if cached and self._clock() - cached[0] < self._ttl:
            return cached[1]
        workspace_id = self._store.workspace_for_token(digest)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (self._clock(), workspace_id)
        return workspace_id
