"""Workspaces and their tokens (operator tasks, local seeding)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from convo_memory.domain.errors import CapabilityNotFound
from convo_memory.domain.models import CapabilityCreate, ToolSpec, iso, utc_now
from convo_memory.ports import CapabilityStore, TokenStore
from convo_memory.services.catalog import CapabilityCatalog, new_id


@dataclass(frozen=True)
class WorkspaceCredentials:
    workspace_id: str
    name: str
    token: str


def hash_token(token: str) -> str:
    """Tokens are stored only as SHA-256 hashes (they are high-entropy secrets, so a
    fast hash is enough; look-ups are by hash, so no comparison leaks timing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_match(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), stored_hash)


def create_workspace(
    store: TokenStore, name: str, token: str | None = None
) -> WorkspaceCredentials:
    """Create a workspace and its token. With a token that already exists, return
    that token's workspace instead (so seeding is idempotent)."""
    token = token or f"cm_{secrets.token_urlsafe(32)}"
    if len(token) < 16:
        raise ValueError("a workspace token must be at least 16 characters")
    digest = hash_token(token)
    existing = store.workspace_for_token(digest)
    if existing:
        return WorkspaceCredentials(existing, name, token)
    workspace_id = new_id("ws")
    now = iso(utc_now())
    store.put_workspace(workspace_id, name, now)
    if not store.put_token(digest, workspace_id, name, now):
        raced = store.workspace_for_token(digest)
        assert raced is not None
        return WorkspaceCredentials(raced, name, token)
    return WorkspaceCredentials(workspace_id, name, token)


DEMO_CAPABILITIES: dict[str, CapabilityCreate] = {
    "cap-generative": CapabilityCreate(name="Demo assistant", kind="generative"),
    "cap-agent": CapabilityCreate(
        name="Demo order agent",
        kind="agent",
        tools=[
            ToolSpec(name="lookup_order", description="Looks up an order's status and ETA"),
            ToolSpec(name="search_kb", description="Searches the help-centre articles"),
        ],
    ),
    "cap-classic": CapabilityCreate(name="Demo sentiment classifier", kind="classic"),
}


def seed_capabilities(store: CapabilityStore, workspace_id: str) -> list[str]:
    """One capability of each kind, with fixed ids so a walkthrough can name them."""
    catalog = CapabilityCatalog(store, cache_ttl_seconds=0)
    for cap_id, body in DEMO_CAPABILITIES.items():
        try:
            catalog.get(workspace_id, cap_id)
        except CapabilityNotFound:
            catalog.create(workspace_id, body, cap_id=cap_id)
    return list(DEMO_CAPABILITIES)


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
