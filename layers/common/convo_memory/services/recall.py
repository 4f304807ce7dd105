"""Taking a new session's recall of its end user's earlier sessions (once, at creation).

The cost is bounded and paid only by sessions of a capability with ``recall``: one
Query of the end user's newest sessions (byExternalRef, at most ``scan_sessions`` of
them looked at), then one consistent Query per earlier session read (its summary, head
and newest turns), ``sessions`` of them, and at most as many again to replace sessions
that were deleted meanwhile or have nothing to recall. A turn reads the recall with
the head, in the Query it already makes.
"""

from __future__ import annotations

from dataclasses import dataclass

from convo_memory.domain.models import Capability, Principal, Recall
from convo_memory.domain.recall import RecallSource, compose_recall
from convo_memory.ports import RecallStore


@dataclass(frozen=True)
class RecallLimits:
    # The end user's newest sessions (of any capability) looked at for candidates.
    scan_sessions: int = 100
    # Turns read from an earlier session that has no summary.
    turns_per_session: int = 10


class RecallTaker:
    def __init__(self, store: RecallStore, limits: RecallLimits | None = None) -> None:
        self._store = store
        self._limits = limits or RecallLimits()

    def take(
        self,
        workspace_id: str,
        capability: Capability,
        external_ref: str,
        principal: Principal | None,
    ) -> Recall | None:
        """The recall a new session of ``capability`` for this end user and principal
        starts with, or None (no ``recall`` on the capability, nothing to recall)."""
        policy = capability.recall
        if policy is None:
            return None
        wanted = policy.sessions
        candidates = self._store.candidates(
            workspace_id,
            external_ref,
            capability.id,
            principal,
            limit=2 * wanted,
            scan=self._limits.scan_sessions,
        )
        sources: list[RecallSource] = []
        while candidates and len(sources) < wanted:
            # The newest ones first; a deleted or empty one is replaced by the next.
            batch, candidates = (
                candidates[: wanted - len(sources)],
                candidates[wanted - len(sources) :],
            )
            found = self._store.sources(batch, self._limits.turns_per_session)
            sources += [source for source in found if source is not None and source.has_text]
        return compose_recall(sources, policy.max_chars)
