"""(v5) Where a turn of the Responses door goes when its request names a response or
items of a conversation rather than the conversation itself: in that conversation, in a
fork at an older answer, nowhere new (a retry, answered with the turn it repeats), or,
for items that name a conversation which cannot take the turn here, a new conversation
opened from the request's history. The serving path (``services.turns``) then serves it
there."""

from __future__ import annotations

from dataclasses import replace

from convo_memory.domain.errors import SessionNotFound, ValidationFailed
from convo_memory.domain.models import Capability
from convo_memory.domain.turn_records import TurnState
from convo_memory.domain.turns import (
    REFERENCE_ROLE,
    SessionByItems,
    SessionByResponse,
    SessionOwner,
    TurnCommand,
    TurnResult,
)
from convo_memory.services.chained_turns import answered_again
from convo_memory.services.conversations import ConversationService, Placement
from convo_memory.services.session_states import SessionStates
from convo_memory.services.turn_steps import TurnInFlight, continues_a_pause, no_response

# A turn placed in a session (its capability, state and the imported user message it is
# written over, if any), answered again, or another command to serve instead.
Routed = tuple[Capability, TurnState, str | None] | TurnResult | TurnCommand
NO_CONVERSATION = (
    "names items of a conversation that cannot take this turn, and has no user message to "
    "open a new one with"
)


class TurnRouter:
    def __init__(self, states: SessionStates, conversations: ConversationService) -> None:
        self._states = states
        self._conversations = conversations

    def after_response(self, turn: TurnInFlight, after: SessionByResponse) -> Routed:
        """A turn after a stored response: in its session when it is the newest there (or
        the pause this turn continues), else in a fork opened at its answer; 404
        ``response_not_found`` for one not stored (any more) in this workspace."""
        ref, continues = after.ref, continues_a_pause(turn.command)
        try:
            capability, state = self._states.session_turn(
                turn.workspace_id,
                turn.command.capability_id,
                ref.session_id,
                after.owner,
                continues,
            )
        except SessionNotFound:
            raise no_response(ref) from None
        placed = self._conversations.after_response(
            turn.workspace_id, state, ref, continues, turn.user_input
        )
        return self._placed(turn, capability, state, placed, after.owner)

    def by_items(self, turn: TurnInFlight, by_items: SessionByItems) -> Routed:
        """(v5) A turn of the conversation of the newest item the request named, as if
        ``previous_response_id`` named its response; a new conversation from the
        request's history where that one cannot take it here (never 404 or 409)."""
        place, continues = by_items.place, continues_a_pause(turn.command)
        found = self._states.bound_turn(
            turn.workspace_id,
            turn.command.capability_id,
            place.session_id,
            by_items.owner,
            continues,
        )
        placed = None
        if found is not None:
            capability, state = found
            placed = self._conversations.at_place(
                turn.workspace_id, state, place, continues, turn.user_input
            )
        if placed is None or placed.unrecorded:
            if by_items.fallback is None:
                raise ValidationFailed(NO_CONVERSATION, param="input")
            fallback = replace(
                turn.command,
                conversation=by_items.fallback,
                input=by_items.fallback_input or turn.command.input,
                rounds=by_items.fallback_rounds,
            )
            return fallback
        return self._placed(turn, capability, state, placed, by_items.owner)

    def _placed(
        self,
        turn: TurnInFlight,
        capability: Capability,
        state: TurnState,
        placed: Placement,
        owner: SessionOwner | None,
    ) -> Routed:
        """A turn where it was placed: in place, in a fork, or answered again."""
        if placed.again is not None:
            return answered_again(placed.again)
        if placed.fill is not None:  # the turn takes the place of its imported input
            at = placed.fill.user_seq
            session = state.session.model_copy(update={"message_count": at - 1})
            recent = tuple(m for m in state.recent if m.seq < at)
            return (
                capability,
                replace(state, session=session, recent=recent),
                placed.fill.ref.reply_id,
            )
        if placed.fork is not None:
            continues = continues_a_pause(turn.command)
            capability, state = self._states.session_turn(
                turn.workspace_id, capability.id, placed.fork, owner, continues
            )
        return capability, state, None

    def read_history(self, turn: TurnInFlight) -> TurnInFlight:
        """A stateless turn with the messages its references name read into its history."""
        command = turn.command
        if not any(message.role == REFERENCE_ROLE for message in command.history):
            return turn
        history = self._conversations.read_references(turn.workspace_id, command.history)
        return replace(turn, command=replace(command, history=history))
