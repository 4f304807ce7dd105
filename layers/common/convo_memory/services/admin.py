"""Workspaces and their tokens (operator tasks, local seeding)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from convo_memory.domain.errors import CapabilityNotFound
from convo_memory.domain.ids import new_id
from convo_memory.domain.models import CapabilityDefinition, ToolSpec, iso, utc_now
from convo_memory.ports import CapabilityStore, TokenStore
from convo_memory.services.auth import hash_token
from convo_memory.services.catalog import CapabilityCatalog


@dataclass(frozen=True)
class WorkspaceCredentials:
    workspace_id: str
    name: str
    token: str
    token_id: str = ""


TOKEN_ID_PREFIX = "tok_"
_TOKEN_ID = re.compile(r"tok_[0-9a-f]{16}")


def token_id_of(token_hash: str) -> str:
    """A token's public id: safe to print, log and paste into a ticket. It is derived
    from the hash (64 of its bits), so whoever holds the token can compute it, while
    the id reveals nothing that helps to find the token."""
    return f"{TOKEN_ID_PREFIX}{token_hash[:16]}"


def create_workspace(
    store: TokenStore, name: str, token: str | None = None, workspace_id: str | None = None
) -> WorkspaceCredentials:
    """Create a workspace and its token. With a token that already exists, return
    that token's workspace instead (so seeding is idempotent). ``workspace_id`` fixes the
    new workspace's id (local seeding: ``ws-dev``, which the sample events name); else a
    fresh one."""
    token = token or f"cm_{secrets.token_urlsafe(32)}"
    if len(token) < 16:
        raise ValueError("a workspace token must be at least 16 characters")
    digest = hash_token(token)
    token_id = token_id_of(digest)
    existing = store.workspace_for_token(digest)
    if existing:
        return WorkspaceCredentials(existing, name, token, token_id)
    workspace_id = workspace_id or new_id("ws")
    now = iso(utc_now())
    store.put_workspace(workspace_id, name, now)
    if not store.put_token(digest, workspace_id, name, now):
        raced = store.workspace_for_token(digest)
        assert raced is not None
        return WorkspaceCredentials(raced, name, token, token_id)
    store.put_token_id(token_id, digest, workspace_id, now)
    return WorkspaceCredentials(workspace_id, name, token, token_id)


@dataclass(frozen=True)
class RevokedToken:
    token_id: str
    workspace_id: str


def revoke_token(
    store: TokenStore, *, token: str | None = None, token_id: str | None = None
) -> RevokedToken | None:
    """Revoke a token, given the token itself or its public id; None when there was no
    such token. Its next look-up that misses the caches (the authorizer's and the
    containers') answers 401."""
    if (token is None) == (token_id is None):
        raise ValueError("give either the token or its id")
    if token is not None:
        digest = hash_token(token)
        token_id = token_id_of(digest)
    else:
        assert token_id is not None
        if not _TOKEN_ID.fullmatch(token_id):
            raise ValueError(f"a token id looks like {TOKEN_ID_PREFIX}<16 hex digits>")
        found = store.token_hash_for_id(token_id)
        if found is None:
            return None
        digest = found
    workspace_id = store.delete_token(digest, token_id)
    return None if workspace_id is None else RevokedToken(token_id, workspace_id)


DEMO_CAPABILITIES: dict[str, CapabilityDefinition] = {
    "cap-generative": CapabilityDefinition(name="Demo assistant", kind="generative"),
    "cap-agent": CapabilityDefinition(
        name="Demo order agent",
        kind="agent",
        tools=(
            ToolSpec(name="lookup_order", description="Looks up an order's status and ETA"),
            ToolSpec(name="search_kb", description="Searches the help-centre articles"),
        ),
    ),
    "cap-classic": CapabilityDefinition(name="Demo sentiment classifier", kind="classic"),
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
