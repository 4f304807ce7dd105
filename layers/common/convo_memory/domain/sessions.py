"""What the session use cases are asked and answer, beside the entities themselves
(``domain.models.Session``): a new session, the changes a PATCH asks for, and the
context the next turn of a session would see."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from convo_memory.domain.replay_window import ReplayWindow, select_replay_window
from convo_memory.domain.summary_plan import summary_for_window
from convo_memory.domain.turn_records import TurnState, live_digests

if TYPE_CHECKING:
    from convo_memory.domain.models import (
        Message,
        Principal,
        Recall,
        ReplayPolicy,
        Summary,
        ToolDigest,
    )
    from convo_memory.domain.paused_turns import PendingTurn


@dataclass(frozen=True)
class NewSession:
    """A session to open: on ``capability_id``, for the end user ``external_ref``, with
    its principal (stamped now, never changed) and metadata. (v4) A conversation opened
    by ``POST /v1/conversations`` names neither: its first response binds them."""

    capability_id: str | None
    external_ref: str | None
    principal: Principal | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionChanges:
    """What a PATCH asks: new metadata (None: none), and the principal and externalRef
    it names, only to be compared (neither ever changes). ``named``: the fields the
    request named, a ``null`` included."""

    metadata: dict[str, Any] | None = None
    principal: Principal | None = None
    external_ref: str | None = None
    named: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ContextPreview:
    """Exactly what the next turn of a session sees: the replay window (the replayed
    messages and what it leaves out), the summary shown, the live digests of the
    replayed turns, and the session's recall; and (v4) the turn waiting for the app's
    tool results, if one is (``/context``'s ``pendingTurn``)."""

    window: ReplayWindow
    summary: Summary | None
    tool_digests: tuple[ToolDigest, ...]
    recall: Recall | None
    pending: PendingTurn | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.window.messages

    @property
    def omitted_messages(self) -> int:
        return self.window.omitted_messages

    @property
    def replayed_chars(self) -> int:
        return self.window.replayed_chars


def context_of(state: TurnState, policy: ReplayPolicy, now: float) -> ContextPreview:
    """What the next turn of ``state``'s session sees under ``policy`` at ``now``: the
    replay rule's window, the summary version behind it, and the digests not expired."""
    window = select_replay_window(state.recent, policy, state.session.message_count)
    summary = summary_for_window(state.summary_versions, window.omitted_messages, policy.alignment)
    digests = tuple(live_digests(state, window.messages, now))
    return ContextPreview(window, summary, digests, state.session.recall)
