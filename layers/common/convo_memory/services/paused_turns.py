"""Turns paused for the app's own tools (v4): what the serving path does with them.

A turn whose model calls one of the app's tools pauses (``pause``): its state is kept at
the position it will be recorded at (``TurnRecorder.keep_pause``, one conditional put)
and the app gets the calls. The session's next request decides what becomes of it:

- the app's tool results continue it (``waiting``, then ``PendingTurn.answered``): the
  model sees what it saw at the pause (``sent_at_pause``), its calls and the results,
  and goes on; the turn is recorded once, when it ends, over the paused item, or pauses
  again (the paused item replaced, conditional on the pause it continued);
- a new user message first ends it as ``abandoned`` (``settle``), as does a pause older
  than ``PENDING_TURN_SECONDS`` (here, by the next request; else by the retention run).

Two requests that continue one pause race on that conditional write: one is recorded,
the other answered ``409 tool_calls_mismatch``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from convo_memory.domain.attachments import FileRef
from convo_memory.domain.errors import ToolCallsMismatch
from convo_memory.domain.models import Capability, Message, Summary, ToolDigest, iso_at, parse_iso
from convo_memory.domain.paused_turns import PendingTurn
from convo_memory.domain.prompt_record import PromptRecord
from convo_memory.domain.sessions import ContextPreview, context_of
from convo_memory.domain.tools import ToolCall, ToolRound
from convo_memory.domain.turn_records import (
    TurnState,
    abandoned_turn,
    live_digests,
    turn_messages,
)
from convo_memory.ports import MetricsPort
from convo_memory.services.answering import AppTurn, ModelAnswer
from convo_memory.services.recording import TurnRecorder

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SentAtPause:
    """What the model was sent at a paused turn's first model call, rebuilt from the
    session's state: the replayed messages, the summary and the digests."""

    messages: tuple[Message, ...]
    summary: Summary | None
    digests: tuple[ToolDigest, ...]


class PausedTurns:
    def __init__(
        self,
        recorder: TurnRecorder,
        metrics: MetricsPort,
        *,
        pending_turn_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self._recorder = recorder
        self._metrics = metrics
        self._pending_seconds = pending_turn_seconds
        self._clock = clock

    # -- the session's next request --------------------------------------------------

    def end_as_abandoned(self, workspace_id: str, state: TurnState, until: float) -> TurnState:
        """Before a new user message: end the session's paused turn, if it has one, as
        abandoned (its user message and the text that came with the calls). The state
        as the new turn then sees it: that turn recorded, the new one after it."""
        pending = state.pending
        if pending is None:
            return state
        self._abandon(workspace_id, state, pending, until)
        user, answer = turn_messages(
            pending.user_seq,
            pending.user_input,
            pending.text,
            pending.created_at,
            pending.withheld,
            truncated=False,
            abandoned=True,
        )
        recent = sorted((*state.recent, user, answer), key=lambda m: m.seq)
        count = max(state.session.message_count, pending.user_seq + 1)
        return replace(
            state,
            session=state.session.model_copy(update={"message_count": count}),
            recent=tuple(recent[-len(state.recent) - 2 :]),
            pending=None,
        )

    def waiting(self, workspace_id: str, state: TurnState, until: float) -> PendingTurn:
        """The paused turn a continuation continues: ``409 tool_calls_mismatch`` when the
        session has none, or when it has waited longer than ``PENDING_TURN_SECONDS``
        (it is recorded as abandoned now)."""
        pending = state.pending
        if pending is None:
            raise ToolCallsMismatch("this session has no turn waiting for tool results")
        if self.expired(pending):
            self._abandon(workspace_id, state, pending, until)
            raise ToolCallsMismatch(
                f"the paused turn waited longer than {self._pending_seconds:g} s for its tool "
                "results and was recorded as abandoned; send the user's message again"
            )
        return pending

    def expired(self, pending: PendingTurn) -> bool:
        return self._clock() >= parse_iso(pending.expires)

    def _abandon(
        self, workspace_id: str, state: TurnState, pending: PendingTurn, until: float
    ) -> None:
        at_pause = state.session.model_copy(update={"message_count": pending.user_seq - 1})
        recorded = self._recorder.record(workspace_id, at_pause, abandoned_turn(pending), until)
        if not recorded.superseded:  # else another request ended it first
            self._metrics.count("PausedTurnsAbandoned")

    # -- continuing ---------------------------------------------------------------------

    def continued(self, pending: PendingTurn, answered: ToolRound, app_tools: AppTurn) -> AppTurn:
        """What the continuation brings to the tool loop: the rounds with the app's
        results, the turn's run, and its calls so far with the app's answered ones."""
        from convo_memory.services.agent_loop import LoopStart

        now = self._clock()
        took = max(0.0, (now - parse_iso(pending.since)) * 1000)
        waited = set(pending.app_call_ids)
        app_calls = tuple(
            ToolCall(
                name=request.name,
                input=dict(request.input),
                output=reply.output,
                started_at=pending.since,
                duration_ms=round(took, 3),
                kind="app",
            )
            for request, reply in zip(answered.requests, answered.replies, strict=True)
            if request.call_id in waited
        )
        start = LoopStart((*pending.rounds, answered), pending.model_calls, pending.usage)
        return replace(
            app_tools, start=start, run_id=pending.run_id, calls=(*pending.calls, *app_calls)
        )

    @staticmethod
    def sent_at_pause(
        state: TurnState, capability: Capability, pending: PendingTurn, now: float
    ) -> SentAtPause:
        """The replayed messages, summary and digests of the paused turn's first model
        call, from the state the continuation read: the same turns (nothing is recorded
        before the paused one), the summary text kept with the pause (or, when it was
        left out for size, the version its record names, else the one the window has)."""
        record = pending.prompt_record
        recent = {message.seq: message for message in state.recent}
        seqs = range(record.first_seq, record.last_seq + 1) if record.first_seq else range(0)
        if all(seq in recent for seq in seqs):
            messages = tuple(recent[seq] for seq in seqs)
        else:  # a racing turn pushed part of the window out of the read: the window now
            logger.warning("the paused turn's window is no longer read whole; replaying today's")
            messages = context_of(state, capability.replay_policy, now).messages
        summary = pending.summary
        if summary is None and record.summary_through:
            kept = [v.summary for v in state.summary_versions]
            named = [s for s in kept if s.through_seq == record.summary_through]
            summary = next(iter(named or kept), None)
        digests = tuple(
            d for d in live_digests(state, messages, now) if d.seq in set(record.digest_seqs)
        )
        return SentAtPause(messages, summary, digests)

    # -- pausing ------------------------------------------------------------------------

    def pause(
        self,
        pause_id: str,
        answer: ModelAnswer,
        previous: PendingTurn | None,
        first: FirstCall | None,
        app: AppTurn,
        attachments: tuple[FileRef, ...] = (),
    ) -> PendingTurn:
        """The state to keep for a turn that paused on its ``first`` call, or again
        when it continued ``previous``, within its size bound. ``pause_id``: the reply id
        of the request that paused it (a response id names the pause by it);
        ``attachments``: (v5) what its user message carries."""
        run = answer.run
        assert run is not None and run.pause is not None
        if previous is None:
            assert first is not None
            previous_texts: tuple[str, ...] = ()
        else:
            first = FirstCall(previous.user_input, previous.prompt_record, previous.summary)
            previous_texts = previous.texts
        clock = self._clock()
        now = iso_at(clock)
        return PendingTurn(
            pause_id=pause_id,
            user_seq=previous.user_seq if previous else 0,
            created_at=previous.created_at if previous else now,
            since=now,
            expires=iso_at(clock + self._pending_seconds),
            user_input=first.user_input,
            prompt_record=first.record,
            summary=first.summary,
            rounds=run.rounds,
            step=run.pause.step,
            app_call_ids=run.pause.app_call_ids,
            calls=(*app.calls, *run.calls),
            texts=(*previous_texts, answer.output),
            withheld=answer.withheld or bool(previous and previous.withheld),
            run_id=answer.turn_run_id,
            traced=answer.run_id is not None or bool(previous and previous.traced),
            model_calls=run.model_calls,
            usage=run.usage,
            attachments=previous.attachments if previous else attachments,
        ).fitted()


@dataclass(frozen=True)
class FirstCall:
    """What a turn's first model call was sent, for a turn that pauses on it: its
    input, its prompt record, and the summary text it showed."""

    user_input: str
    record: PromptRecord
    summary: Summary | None

    @classmethod
    def of(
        cls, user_input: str, seen: ContextPreview, recalled: bool, app_tools: Sequence[str]
    ) -> FirstCall:
        record = PromptRecord.of(
            seen.window.messages,
            seen.summary,
            seen.tool_digests,
            recall=recalled,
            app_tools=app_tools,
        )
        return cls(user_input, record, seen.summary)
