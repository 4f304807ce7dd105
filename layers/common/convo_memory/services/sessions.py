"""Session use cases: create, read, list, patch metadata, delete, transcript, context."""

from __future__ import annotations

import time
from typing import Any, Protocol

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    ExternalRefImmutable,
    PrincipalImmutable,
    SessionNotFound,
    ValidationFailed,
)
from convo_memory.domain.models import (
    ContextView,
    Message,
    Session,
    SessionCreate,
    SessionPatch,
    ToolDigest,
    iso,
    utc_now,
)
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.services.catalog import CapabilityCatalog, new_id


class SessionStore(Protocol):
    def create_session(self, session: Session) -> None: ...
    def get_session(self, session_id: str) -> Session | None: ...
    # Newest first, after ``after`` = (createdAt, id) of the previous page's last session;
    # and whether there may be more.
    def list_sessions(
        self, workspace_id: str, external_ref: str, limit: int, after: tuple[str, str] | None
    ) -> tuple[list[Session], bool]: ...
    def update_metadata(
        self, session_id: str, workspace_id: str, metadata: dict[str, Any]
    ) -> Session | None: ...
    def delete_session(self, session_id: str) -> int: ...
    def list_messages(
        self, session_id: str, after_seq: int, limit: int
    ) -> tuple[list[Message], bool]: ...
    def load_turn_state(self, session_id: str, max_messages: int, with_digests: bool) -> Any: ...


def live_digests(state: Any, replayed: tuple[Message, ...], now: float) -> list[ToolDigest]:
    """Digests of replayed turns whose retention window has not passed. DynamoDB TTL
    deletes lazily, so expiry is enforced on read too."""
    seqs = {m.seq for m in replayed}
    return [
        digest
        for seq, digest in sorted(state.digests.items())
        if seq in seqs and state.digest_expiry.get(seq, 0) > now
    ]


class SessionService:
    def __init__(self, store: SessionStore, catalog: CapabilityCatalog) -> None:
        self._store = store
        self._catalog = catalog

    def create(self, workspace_id: str, body: SessionCreate) -> Session:
        capability = self._catalog.get(workspace_id, body.capability_id)
        if not capability.conversational:
            raise CapabilityNotConversational(
                f"capability {capability.id!r} is a classic ML capability; it has no notion "
                "of a previous turn, so it cannot hold a session"
            )
        now = iso(utc_now())
        session = Session(
            id=new_id("ses"),
            workspace_id=workspace_id,
            capability_id=capability.id,
            external_ref=body.external_ref,
            principal=body.principal,
            metadata=body.metadata,
            status="active",
            created_at=now,
            last_active_at=now,
            message_count=0,
        )
        self._store.create_session(session)
        return session

    def get(self, workspace_id: str, session_id: str) -> Session:
        session = self._store.get_session(session_id)
        if session is None or session.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        return session

    def find(
        self,
        workspace_id: str,
        external_ref: str,
        limit: int,
        after: dict[str, Any] | None = None,
    ) -> tuple[list[Session], dict[str, Any] | None]:
        """An end user's sessions, newest first, after the position ``after`` (a previous
        page's next position); and the next page's position, or None on the last page."""
        start = None
        if after is not None:
            created_at, session_id = after.get("createdAt"), after.get("id")
            if not (isinstance(created_at, str) and isinstance(session_id, str)):
                raise ValidationFailed("nextToken is not a token this API issued")
            start = (created_at, session_id)
        sessions, more = self._store.list_sessions(workspace_id, external_ref, limit, start)
        if not (more and sessions):
            return sessions, None
        return sessions, {"createdAt": sessions[-1].created_at, "id": sessions[-1].id}

    def patch(self, workspace_id: str, session_id: str, body: SessionPatch) -> Session:
        current = self.get(workspace_id, session_id)
        fields = body.model_fields_set
        if "principal" in fields and body.principal != current.principal:
            raise PrincipalImmutable(
                "a session's principal is stamped at creation and never changes; "
                "open a new session to converse as someone else"
            )
        if "external_ref" in fields and body.external_ref != current.external_ref:
            raise ExternalRefImmutable(
                "a session's externalRef never changes; open a new session for another end user"
            )
        if body.metadata is None:
            if "metadata" in fields:
                raise ValidationFailed("metadata must be an object")
            return current
        updated = self._store.update_metadata(session_id, workspace_id, body.metadata)
        if updated is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return updated

    def delete(self, workspace_id: str, session_id: str) -> None:
        self.get(workspace_id, session_id)
        self._store.delete_session(session_id)

    def messages(
        self, workspace_id: str, session_id: str, limit: int, after: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any] | None]:
        """A page of the transcript, oldest first, after the position ``after``; and the
        next page's position, or None on the last page."""
        after_seq = 0 if after is None else after.get("after")
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
            raise ValidationFailed("nextToken is not a token this API issued")
        self.get(workspace_id, session_id)
        page, more = self._store.list_messages(session_id, after_seq, limit)
        return page, ({"after": page[-1].seq} if more and page else None)

    def context(self, workspace_id: str, session_id: str) -> ContextView:
        """Exactly what the next turn would see."""
        session = self.get(workspace_id, session_id)
        capability = self._catalog.get(workspace_id, session.capability_id)
        policy = capability.replay_policy
        state = self._store.load_turn_state(
            session_id, policy.max_messages, with_digests=capability.kind == "agent"
        )
        if state is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        window = select_replay_window(state.recent, policy, state.session.message_count)
        return ContextView(
            summary=state.summary,
            messages=list(window.messages),
            tool_digests=live_digests(state, window.messages, time.time()),
            omitted_messages=window.omitted_messages,
            replayed_chars=window.replayed_chars,
        )
