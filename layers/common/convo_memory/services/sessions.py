"""Session use cases: create, read, list, patch metadata, delete, transcript, context."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    ExternalRefImmutable,
    NotFound,
    PrincipalImmutable,
    RecallSourceGone,
    SessionArchived,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.ids import new_id
from convo_memory.domain.models import (
    Capability,
    Message,
    ReplayPolicy,
    Session,
    iso_at,
    parse_iso,
)
from convo_memory.domain.prompt import DEFAULT_INSTRUCTIONS, new_fence_nonce
from convo_memory.domain.prompt_record import SentPrompt, sent_prompt
from convo_memory.domain.sessions import ContextPreview, NewSession, SessionChanges, context_of
from convo_memory.domain.turn_abandonment import note_opened
from convo_memory.domain.turn_records import TurnRecord, user_seq_of
from convo_memory.domain.turns import SessionOwner
from convo_memory.ports import SessionStore, TurnStore
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.recall import RecallTaker

# Takes of a recall before the session is created without one: each retry follows a
# deletion of a session the previous take read, landing between the read and the write.
RECALL_ATTEMPTS = 3
_T = TypeVar("_T")


class SessionService:
    def __init__(
        self,
        sessions: SessionStore,
        turns: TurnStore,
        catalog: CapabilityCatalog,
        clock: Callable[[], float] = time.time,
        *,
        recall: RecallTaker,
        after_delete: Callable[[str, str], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._turns = turns
        self._catalog = catalog
        self._clock = clock
        self._recall = recall
        # Told (workspace, session) after a deletion: schedules its delayed sweep.
        self._after_delete = after_delete

    def create(
        self,
        workspace_id: str,
        new: NewSession,
        *,
        session_key: str | None = None,
        history: Sequence[TurnRecord] = (),
    ) -> Session:
        """Open a session (every door that opens sessions comes here). With
        ``session_key`` (an app's own key, OpenAI-compatible door) the key is claimed in
        the same write, or ``SessionKeyTaken`` names the session that claimed it first. On
        a capability with ``recall``, the session starts with what the end user said in
        earlier sessions, taken now and stored with its head. ``history``: (v4) its first
        turns (history an app brought), written with the head, so only the call that
        opens the session imports them. A conversation names no capability (yet)."""
        capability = self._catalog.bound(workspace_id, new.capability_id)
        if capability is not None and not capability.conversational:
            raise CapabilityNotConversational.of(capability.id)
        now = iso_at(self._clock())
        session = Session(
            id=new_id("ses"),
            workspace_id=workspace_id,
            capability_id=capability.id if capability is not None else None,
            external_ref=new.external_ref,
            principal=new.principal,
            metadata=new.metadata,
            status="active",
            created_at=now,
            last_active_at=now,
            message_count=0,
            session_key=session_key,
            fence_nonce=new_fence_nonce(),
        )
        stored, _ = self._store_recalling(
            session, capability, lambda s: self._sessions.create_session(s, history)
        )
        note_opened(stored.id)  # a turn given up removes what it opened
        return stored.model_copy(update={"message_count": 2 * len(history)})

    def bind(self, session: Session, capability: Capability, owner: SessionOwner | None) -> Session:
        """(v4) Bind a conversation no response has bound yet to ``capability`` and to
        ``owner``'s end user and principal (none: neither), for good: what its first
        response is served with (and, on a capability with ``recall``, its recall, taken
        now). A racing first response that bound it first wins: the session as that one
        bound it is returned, for the turn to check as any other."""
        owned = owner or SessionOwner(None)
        candidate = session.model_copy(
            update={
                "capability_id": capability.id,
                "external_ref": owned.external_ref,
                "principal": owned.principal,
            }
        )
        bound, won = self._store_recalling(candidate, capability, self._sessions.bind_session)
        if won:
            return bound
        current = self.get(session.workspace_id, session.id)  # 404 when deleted meanwhile
        if current.capability_id is None:
            if current.status == "archived":
                raise SessionArchived("the session is archived and accepts no new turns")
            raise StoreUnavailable(f"could not bind conversation {session.id}; retry")
        return current

    def _store_recalling(
        self, session: Session, capability: Capability | None, store: Callable[[Session], _T]
    ) -> tuple[Session, _T]:
        """``store`` the session, with a recall when its capability recalls and it has an
        end user: taken now, and taken again when a session it came from is deleted
        before the write (which checks that they all still exist)."""
        if capability is None or capability.recall is None or session.external_ref is None:
            return session, store(session)
        for _ in range(RECALL_ATTEMPTS):
            recall = self._recall.take(
                session.workspace_id, capability, session.external_ref, session.principal
            )
            recalling = session.model_copy(update={"recall": recall})
            try:
                return recalling, store(recalling)
            except RecallSourceGone:
                continue  # taken again: the deleted session is skipped now
        # Never a recall that holds a deleted session's text: none, this once.
        return session, store(session)

    def get(self, workspace_id: str, session_id: str) -> Session:
        session = self._sessions.get_session(session_id)
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
        sessions, more = self._sessions.list_sessions(workspace_id, external_ref, limit, start)
        if not (more and sessions):
            return sessions, None
        return sessions, {"createdAt": sessions[-1].created_at, "id": sessions[-1].id}

    def patch(self, workspace_id: str, session_id: str, changes: SessionChanges) -> Session:
        """Replace the session's metadata. Naming its principal or externalRef with
        another value is refused (409), never silently dropped."""
        current = self.get(workspace_id, session_id)
        fields = changes.named
        if "principal" in fields and changes.principal != current.principal:
            raise PrincipalImmutable(
                "a session's principal is stamped at creation and never changes; "
                "open a new session to converse as someone else"
            )
        if "external_ref" in fields and changes.external_ref != current.external_ref:
            raise ExternalRefImmutable(
                "a session's externalRef never changes; open a new session for another end user"
            )
        if changes.metadata is None:
            if "metadata" in fields:
                raise ValidationFailed("metadata must be an object")
            return current
        updated = self._sessions.update_metadata(session_id, workspace_id, changes.metadata)
        if updated is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return updated

    def delete(self, workspace_id: str, session_id: str) -> None:
        """Mark the session deleted and strip its head to a tombstone (keys, status,
        times: it answers 404 from now on), then remove its transcript, summary and
        digests. A retry resumes an interrupted deletion. A write that was in flight
        lands in no route's view (404) and is removed by the delayed sweep (and again by
        the retention run, which removes the tombstone once no turn in flight can still
        land; see ``RetentionService``). Run traces are never touched."""
        if not self._sessions.begin_deletion(session_id, workspace_id, iso_at(self._clock())):
            raise SessionNotFound(f"session {session_id!r} not found")
        self._sessions.delete_contents(session_id)
        if self._after_delete is not None:
            self._after_delete(workspace_id, session_id)

    def messages(
        self, workspace_id: str, session_id: str, limit: int, after: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any] | None]:
        """A page of the transcript, oldest first, after the position ``after``; and the
        next page's position, or None on the last page."""
        after_seq = 0 if after is None else after.get("after")
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
            raise ValidationFailed("nextToken is not a token this API issued")
        self.get(workspace_id, session_id)
        page, more = self._turns.list_messages(session_id, after_seq, limit)
        return page, ({"after": page[-1].seq} if more and page else None)

    def context(self, workspace_id: str, session_id: str) -> ContextPreview:
        """Exactly what the next turn would see, and the turn still waiting for the app's
        tool results (one past its ``PENDING_TURN_SECONDS`` waits no more: the next
        request, or the retention run, records it as abandoned)."""
        session = self.get(workspace_id, session_id)
        # A conversation no response has bound yet replays by the default policy.
        capability = self._catalog.bound(workspace_id, session.capability_id)
        policy = capability.replay_policy if capability is not None else ReplayPolicy()
        with_digests = capability is not None and capability.kind == "agent"
        state = self._turns.load_turn_state(session_id, policy.max_messages, with_digests)
        if state is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        now = self._clock()
        pending = state.pending
        if pending is not None and now >= parse_iso(pending.expires):
            pending = None
        return replace(context_of(state, policy, now), pending=pending)

    def sent_prompt(self, workspace_id: str, session_id: str, seq: int) -> SentPrompt:
        """What the model was sent for the first model call of the turn that holds
        message ``seq`` (its answer or its user message), rebuilt from what is stored.
        ``NotFound`` for a seq the session does not have, or a turn recorded before
        records of what turns were sent were kept."""
        session = self.get(workspace_id, session_id)
        stored = self._turns.stored_prompt(session_id, user_seq_of(seq)) if seq > 0 else None
        if stored is None:
            raise NotFound(f"session {session_id!r} has no message {seq}")
        if stored.record is None:
            raise NotFound(
                f"no record of what message {seq}'s turn was sent is kept (it was recorded "
                "before such records were)"
            )
        # A turn was sent its capability's instructions: a session with a recorded prompt
        # is bound to one.
        capability = self._catalog.bound(workspace_id, session.capability_id)
        instructions = (capability.instructions if capability else None) or DEFAULT_INSTRUCTIONS
        return sent_prompt(stored, stored.record, instructions, session.recall, self._clock())
