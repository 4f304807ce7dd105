"""Sessions an app names by its own key (the OpenAI-compatible door's
``X-Convo-Session-Key``): found by the key, or opened on first use through the same
creation path as ``POST /v1/sessions``.

A key belongs to one workspace and capability. Its session is found with one strongly
consistent read of the key item (no scan) and then remembered by this container (a key
names its session until the session is deleted, and a deleted one is noticed by the turn,
which asks again): a warm container serves a keyed turn with the same requests as a turn
by session id. Concurrent first calls race on one conditional write; the losers take the
winner's session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    SessionKeyTaken,
    StoreUnavailable,
)
from convo_memory.domain.sessions import NewSession
from convo_memory.domain.turn_records import TurnRecord
from convo_memory.domain.turns import SessionOwner
from convo_memory.ports import SessionStore
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.sessions import SessionService

# The records of a key's first turns, made only when the call opens its session.
History = Callable[[], Sequence[TurnRecord]]

MAX_REMEMBERED_KEYS = 10_000
OPEN_ATTEMPTS = 5
# Between attempts when another call's claim of the key has not landed yet.
RACE_PAUSE_SECONDS = 0.02


class SessionKeys:
    def __init__(
        self,
        sessions: SessionService,
        store: SessionStore,
        catalog: CapabilityCatalog,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._sessions = sessions
        self._store = store
        self._catalog = catalog
        self._sleep = sleep
        self._known: dict[tuple[str, str, str], str] = {}

    def resolve(
        self,
        workspace_id: str,
        capability_id: str,
        session_key: str,
        owner: SessionOwner,
        history: History = tuple,
        *,
        opens: bool = True,
    ) -> str | None:
        """The id of the key's session: remembered, read, or opened now (``owner``'s
        externalRef and principal, ``history()`` its first turns: the app's messages before
        its input, imported by the call that opens it and only then read, so later calls
        ignore them); with ``opens`` False, None when the key has no session (a call that
        can only be refused opens nothing). Whether ``owner`` may use it is the turn's
        check."""
        capability = self._catalog.get(workspace_id, capability_id)  # 404 first
        if not capability.conversational:
            raise CapabilityNotConversational.of(capability.id)
        claim = (workspace_id, capability.id, session_key)
        known = self._known.get(claim)
        if known is not None:
            return known
        found = self._store.session_for_key(*claim)
        if found:
            return self._remember(claim, found)
        return self._open(claim, owner, history) if opens else None

    def reopen(
        self,
        workspace_id: str,
        capability_id: str,
        session_key: str,
        owner: SessionOwner,
        gone: str,
        history: History = tuple,
        *,
        opens: bool = True,
    ) -> str | None:
        """The key's session after its session ``gone`` turned out deleted: the key is
        released (if it still names ``gone``) and opens a new session (with ``opens``
        False, None instead)."""
        claim = (workspace_id, capability_id, session_key)
        self._known.pop(claim, None)
        found = self._store.session_for_key(*claim)
        if found is not None and found != gone:
            return self._remember(claim, found)
        if found == gone:
            self._store.release_session_key(*claim, gone)
        return self._open(claim, owner, history) if opens else None

    def _open(self, claim: tuple[str, str, str], owner: SessionOwner, history: History) -> str:
        workspace_id, capability_id, session_key = claim
        assert owner.external_ref is not None  # a key's owner names its end user (SessionByKey)
        new = NewSession(capability_id, owner.external_ref, owner.principal)
        first_turns = history()  # 413 for a message over the input limit: nothing opened
        for attempt in range(OPEN_ATTEMPTS):
            try:
                session = self._sessions.create(
                    workspace_id, new, session_key=session_key, history=first_turns
                )
                return self._remember(claim, session.id)
            except SessionKeyTaken as taken:
                winner = taken.session_id or self._store.session_for_key(*claim)
                if winner is not None:
                    return self._remember(claim, winner)
            self._sleep(RACE_PAUSE_SECONDS * (attempt + 1))
        raise StoreUnavailable("could not open the session key's session; retry")

    def _remember(self, claim: tuple[str, str, str], session_id: str) -> str:
        if len(self._known) >= MAX_REMEMBERED_KEYS:
            self._known.clear()
        self._known[claim] = session_id
        return session_id
