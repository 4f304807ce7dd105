"""(v5) Turns of a conversation that record nothing new: a retry answered with the turn it
repeats (``answered_again``), and a turn that reads its conversation for the model but
records nothing (``serve_unrecorded``: the Responses door's ``store: false`` with a
conversation or a previous response)."""

from __future__ import annotations

from dataclasses import replace

from convo_memory.domain.models import Capability, parse_iso
from convo_memory.domain.responses import StoredResponse
from convo_memory.domain.sessions import context_of
from convo_memory.domain.turn_records import TurnState
from convo_memory.domain.turns import TurnPosition, TurnResult
from convo_memory.services.answering import Answerer
from convo_memory.services.attachments import AttachmentService
from convo_memory.services.session_states import SessionStates
from convo_memory.services.turn_steps import (
    TurnInFlight,
    app_turn_of,
    replay_stats,
    window_prompt,
)


def answered_again(found: StoredResponse) -> TurnResult:
    """The result of the turn a retry repeats, as it was recorded (or a pause that still
    waits, with its calls): nothing is asked of the model, nothing is written."""
    session_id, user_seq = found.session.id, found.user_seq
    at = int(parse_iso(found.answer.created_at))
    waiting = bool(found.waiting)
    return TurnResult(
        reply_id=found.ref.reply_id,
        created=at,
        output=found.answer.content,
        withheld=found.answer.withheld,
        session_id=session_id,
        turn=None if waiting else TurnPosition(user_seq, user_seq + 1),
        recorded=not waiting,
        run_id=found.run_id,
        context=None,
        finish="tool_calls" if waiting else ("length" if found.settings.cut else "stop"),
        tool_calls=found.waiting,
        begun_seq=user_seq,
        completed=at,
    )


def serve_unrecorded(
    answerer: Answerer,
    states: SessionStates,
    turn: TurnInFlight,
    capability: Capability,
    state: TurnState,
    now: float,
    attachments: AttachmentService,
) -> TurnResult:
    """A turn that sees its conversation as a turn of it would (the replay window, the
    summary, digests, recall, their attachments) and records nothing: no pause is kept, a
    waiting one is left waiting, the activity mark does not move, its own attachments
    pass to the model as given and are not stored. The app's calls come back as they
    are, as on a stateless turn."""
    states.refuse_archived(state)
    files = attachments.passed(attachments.for_capability(turn.files, capability))
    turn = replace(turn, files=files)
    seen = context_of(state, capability.replay_policy, now)
    prompt = window_prompt(turn, capability, state, seen, states.fence_nonce(state.session))
    prompt = attachments.attached(turn.workspace_id, capability, prompt, files)
    turn = turn.begun(None)
    answer = answerer.answer(
        turn.workspace_id,
        capability,
        state.session,
        prompt,
        turn.sink,
        deadline=turn.deadline,
        app=app_turn_of(turn.command),
    )
    return replace(turn.result(answer, context=replay_stats(seen)), begun_seq=None)
