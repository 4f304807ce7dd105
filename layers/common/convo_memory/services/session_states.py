"""The session side of a turn: which capability and state a turn of a session is
served with (one Query, with the session's capability remembered per container), and
what a turn keeps on its head (the coarse activity mark, the fence nonce)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    ExternalRefImmutable,
    PrincipalImmutable,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    StoreRejected,
    StoreUnavailable,
)
from convo_memory.domain.models import Capability, Session, iso_at, parse_iso
from convo_memory.domain.prompt import new_fence_nonce
from convo_memory.domain.turn_records import TurnState
from convo_memory.domain.turns import SessionOwner
from convo_memory.ports import SessionStore, TurnStore
from convo_memory.services.catalog import CapabilityCatalog

logger = logging.getLogger(__name__)

MAX_REMEMBERED_SESSIONS = 10_000
# Binds a conversation to its first turn's capability and owner: the session, bound.
Binder = Callable[[Session, Capability, SessionOwner | None], Session]


class SessionStates:
    def __init__(
        self,
        catalog: CapabilityCatalog,
        sessions: SessionStore,
        turns: TurnStore,
        activity_granularity_seconds: float,
        bind: Binder | None = None,
    ) -> None:
        """``bind``: (v4) binds a conversation no turn has bound yet to the capability
        of its first turn and to who that turn says it is (none: it is refused, 409)."""
        self._catalog = catalog
        self._sessions = sessions
        self._turns = turns
        self._granularity = activity_granularity_seconds
        self._bind = bind
        # A session's capability never changes, so this container may remember it:
        # the messages door then reads the session state in one request too.
        self._session_capability: dict[tuple[str, str], str] = {}

    def session_turn(
        self,
        workspace_id: str,
        capability_id: str | None,
        session_id: str,
        owner: SessionOwner | None = None,
        continues: bool = False,
    ) -> tuple[Capability, TurnState]:
        """The capability and the session state a turn of ``session_id`` is served with
        (``capability_id`` None: the session's own), once the session may take it from
        this door (404, 409 otherwise). ``continues``: the turn continues a paused one."""
        if capability_id is None:  # the session's own capability
            capability = self._catalog.get(
                workspace_id, self._capability_of(workspace_id, session_id)
            )
        else:
            capability = self._catalog.get(workspace_id, capability_id)
            if not capability.conversational:
                raise CapabilityNotConversational.of(capability.id)
        state = self._load(workspace_id, session_id, capability, continues)
        if state.session.capability_id is None and self._bind is not None:
            # A conversation (v4): its first turn binds it, for good.
            state = replace(state, session=self._bind(state.session, capability, owner))
        if state.session.capability_id != capability.id:
            raise SessionCapabilityMismatch(
                f"session {session_id!r} belongs to capability {state.session.capability_id!r}"
            )
        if owner is not None:
            owner.check(state.session)
        return capability, state

    def bound_turn(
        self,
        workspace_id: str,
        capability_id: str | None,
        session_id: str,
        owner: SessionOwner | None,
        continues: bool,
    ) -> tuple[Capability, TurnState] | None:
        """(v5) ``session_turn`` for a conversation the request's items name without
        naming it: None where it cannot take the turn here (deleted, another
        capability's, another end user's or principal's, archived), so that a new one
        is opened from the history instead of a 404 or a 409."""
        capability = self._catalog.get(workspace_id, capability_id) if capability_id else None
        if capability is not None and not capability.conversational:
            raise CapabilityNotConversational.of(capability.id)
        try:
            found = self.session_turn(workspace_id, capability_id, session_id, owner, continues)
        except (
            SessionNotFound,
            SessionCapabilityMismatch,
            ExternalRefImmutable,
            PrincipalImmutable,
        ):
            return None
        return found if found[1].session.status == "active" else None

    def _capability_of(self, workspace_id: str, session_id: str) -> str:
        capability_id = self._session_capability.get((workspace_id, session_id))
        if capability_id is None:
            session = self._sessions.get_session(session_id)
            if session is None or session.workspace_id != workspace_id:
                raise SessionNotFound(f"session {session_id!r} not found")
            capability_id = session.capability_id
        if capability_id is None:
            raise SessionCapabilityMismatch(unbound_conversation(session_id))
        return capability_id

    def _load(
        self, workspace_id: str, session_id: str, capability: Capability, continues: bool
    ) -> TurnState:
        state = self._turns.load_turn_state(
            session_id,
            capability.replay_policy.max_messages,
            with_digests=capability.kind == "agent",
            pending=continues,
        )
        if state is None or state.session.workspace_id != workspace_id:
            raise SessionNotFound(f"session {session_id!r} not found")
        if len(self._session_capability) > MAX_REMEMBERED_SESSIONS:
            self._session_capability.clear()
        if state.session.capability_id is not None:
            self._session_capability[(workspace_id, session_id)] = state.session.capability_id
        return state

    @staticmethod
    def refuse_archived(state: TurnState) -> None:
        """An archived session takes no turn (409), a paused one's continuation neither."""
        if state.session.status != "active":
            raise SessionArchived("the session is archived and accepts no new turns")

    def mark_active(self, state: TurnState, now: float) -> None:
        """Refuse a turn on an archived session; move the head's coarse activity mark
        when it is older than the granularity. The mark's write is conditional on the
        session being active, so it serializes with archiving and deletion."""
        session = state.session
        self.refuse_archived(state)
        mark = parse_iso(state.activity_mark) if state.activity_mark else 0.0
        if now - mark >= self._granularity:
            self._sessions.touch(session.id, iso_at(now))

    def fence_nonce(self, session: Session) -> str:
        """The session's fence nonce. A session created before nonces were kept gets one
        stored on its first turn (the winner of racing turns is kept); if the head
        cannot take it (archived or deleted meanwhile, or the write failed), this turn
        uses a fresh one: only the prompt's reuse by a cache is lost, never the fence."""
        if session.fence_nonce:
            return session.fence_nonce
        try:
            kept = self._sessions.keep_fence_nonce(session.id, new_fence_nonce())
        except (StoreUnavailable, StoreRejected):
            logger.warning("could not keep a fence nonce for session %s", session.id)
            kept = None
        return kept or new_fence_nonce()


def unbound_conversation(session_id: str) -> str:
    """Why a turn on the conversation's own capability is refused before it has one."""
    return (
        f"conversation {session_id!r} has no model yet: a turn that names one (a response's "
        "model, predict's capability) binds it"
    )
