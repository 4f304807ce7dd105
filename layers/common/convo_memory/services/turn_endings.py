"""How a turn ends (``TurnService``): recorded exactly once (or handed over to be
repaired), with a summary asked for when one is due, or kept paused for the app's tools
and answered with its calls; a retry that finds its twin already recorded answers with
that turn."""

from __future__ import annotations

from dataclasses import replace

from convo_memory.domain.app_call_ids import shown_calls
from convo_memory.domain.errors import ToolCallsMismatch
from convo_memory.domain.models import Capability
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.turn_records import TurnRecord, TurnState
from convo_memory.domain.turns import ReplayStats, TurnResult
from convo_memory.services.answering import AppTurn, ModelAnswer
from convo_memory.services.paused_turns import FirstCall, PausedTurns
from convo_memory.services.recording import TurnRecorder
from convo_memory.services.summary_trigger import SummaryTrigger
from convo_memory.services.turn_steps import TurnInFlight

PAUSE_ENDED_FIRST = "another request continued or ended this paused turn first"


class TurnEndings:
    def __init__(
        self, recorder: TurnRecorder, pauses: PausedTurns, trigger: SummaryTrigger
    ) -> None:
        self._recorder = recorder
        self._pauses = pauses
        self._trigger = trigger

    def keep_pause(
        self,
        turn: TurnInFlight,
        state: TurnState,
        answer: ModelAnswer,
        previous: PendingTurn | None,
        first: FirstCall | None,
        app: AppTurn,
        stats: ReplayStats,
    ) -> TurnResult:
        """Keep a turn that paused (at the next position, or over the pause it
        continued) and answer with its calls; 409 when that pause was ended meanwhile."""
        pending = self._pauses.pause(turn.reply_id, answer, previous, first, app, turn.files.refs)
        replaces = previous.pause_id if previous is not None else None
        kept = self._recorder.keep_pause(state.session, pending, replaces, until=turn.until)
        if kept is None:
            raise ToolCallsMismatch(PAUSE_ENDED_FIRST)
        result = turn.result(answer, state.session.id, None, False, stats)
        # The app is shown ids the service minted, naming where the pause landed.
        shown = shown_calls(state.session.id, kept)
        return replace(result, tool_calls=shown, begun_seq=kept.user_seq)

    def record(
        self,
        turn: TurnInFlight,
        capability: Capability,
        state: TurnState,
        record: TurnRecord,
        answer: ModelAnswer,
        stats: ReplayStats,
    ) -> TurnResult:
        """Record the turn (or hand it over), ask for a summary when one is due, answer."""
        session = state.session
        # The turn's time includes recording it (or handing it over) after its deadline.
        recorded = self._recorder.record(turn.workspace_id, session, record, until=turn.until)
        if recorded.superseded:
            raise ToolCallsMismatch(PAUSE_ENDED_FIRST)
        if recorded.twin is not None:  # (v5) a retry: the turn it repeats answers it
            twin = recorded.twin
            result = turn.result(answer, session.id, recorded.position, True, stats)
            return replace(
                result, reply_id=twin.turn_id, output=twin.answer, withheld=twin.withheld
            )
        if recorded.recorded:
            self._trigger.after_turn(
                turn.workspace_id,
                state,
                capability.replay_policy,
                record.user_content,
                record.answer,
            )
        return turn.result(answer, session.id, recorded.position, recorded.recorded, stats)
