"""The rolling-summary fold (SummaryService) over fakes, wired by the composition root
(or by hand with the same stores where a test needs another policy): when a fold is due
and how far it folds ahead, the watermark rules (never twice, never skipped, never
backwards), the time bound, which sessions it skips, and that it never enqueues."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convo_memory.domain.errors import ProviderError, StoreUnavailable
from convo_memory.domain.models import Summary
from convo_memory.services.summaries import (
    SummaryPolicy,
    SummaryService,
    TranscriptGap,
)
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import FakeApp, fake_app
from tests.support.turns import predict

WS = "ws_alpha"
CAP = "cap_chat"
# maxMessages 4, a budget that never binds: the newest 4 messages are replayed, so
# after n messages the newest omitted seq is n - 4, and n - 2 one turn later. A batch of
# 5 turns is more than the window holds: a fold runs through the newest message.
REPLAY = {"maxMessages": 4, "maxChars": 100_000, "minMessages": 1}


def line(seq: int) -> str:
    """The fake summarizer's line for message ``seq`` (user odd, assistant even)."""
    turn = (seq + 1) // 2
    return f"user: question {turn}" if seq % 2 else f"assistant: answer {turn}"


def lines(first: int, last: int) -> list[str]:
    return [line(seq) for seq in range(first, last + 1)]


@dataclass
class Call:
    previous: str | None
    messages: list[tuple[str, str]]
    max_chars: int


@dataclass
class FakeSummarizer:
    """Appends one ``role: content`` line per message to the previous summary, so a
    summary shows exactly which messages were folded, how often and in what order."""

    calls: list[Call] = field(default_factory=list)
    fail_with: Exception | None = None
    # Runs inside the call, before the answer: a racing job or a turn landing meanwhile.
    during_call: Callable[[int], object] | None = None
    pad_to: int = 0  # answer at least this long (a summarizer ignoring max_chars)

    def summarize(
        self, previous: str | None, messages: list[tuple[str, str]], max_chars: int
    ) -> str:
        self.calls.append(Call(previous, list(messages), max_chars))
        if self.fail_with is not None:
            raise self.fail_with
        if self.during_call is not None:
            self.during_call(len(self.calls))
        text = "\n".join(
            [*(previous.splitlines() if previous else []), *(f"{r}: {c}" for r, c in messages)]
        )
        return text.ljust(self.pad_to, "x")


@dataclass
class World:
    app: FakeApp
    summarizer: FakeSummarizer
    session_id: str = ""

    def service(self, **policy: float) -> SummaryService:
        """The container's SummaryService; with ``policy`` overrides (work bounds the
        deployment settings do not expose), one wired the same way with that policy."""
        if not policy:
            return self.app.container.summaries
        return self.rival(self.summarizer, **policy)

    def rival(self, summarizer: FakeSummarizer, **policy: float) -> SummaryService:
        """Another job's service (another container) over the same stores and queue."""
        stores = self.app.db.stores
        return SummaryService(
            sessions=stores.sessions,
            turns=stores.turns,
            summaries=stores.summaries,
            catalog=self.app.container.catalog,
            summarizer_for=lambda _cap: summarizer,
            policy=SummaryPolicy(**policy),  # type: ignore[arg-type]
            metrics=self.app.metrics,
            clock=self.app.clock,
        )

    def turns(self, n: int, session_id: str | None = None) -> None:
        sid = session_id or self.session_id
        start = len(self.app.db.messages_of(sid)) // 2
        for i in range(start + 1, start + n + 1):
            self.app.db.add_turn(sid, f"question {i}", f"answer {i}")

    def summary(self, session_id: str | None = None) -> Summary | None:
        return self.app.db.summaries.get(session_id or self.session_id)

    def summary_lines(self) -> list[str]:
        summary = self.summary()
        return summary.text.splitlines() if summary else []

    def set_summary(self, through: int) -> Summary:
        summary = Summary(text="\n".join(lines(1, through)), through_seq=through)
        assert self.app.db.stores.summaries.advance_summary(self.session_id, 0, summary)
        return summary


def make_world(summary_max_chars: int = 50_000, **overrides: Any) -> World:
    """One conversation (``world.session_id``) on a chat capability whose window replays
    the newest 4 messages; ``overrides`` are deployment settings."""
    summarizer = FakeSummarizer()
    app = fake_app(
        # Answers as the seeded history's: "question n" -> "answer n".
        provider=FakeProvider(lambda p: p.user_input.replace("question", "answer")),
        summarizer=summarizer,
        **overrides,
    )
    app.capability(CAP, replay=REPLAY, summary={"maxChars": summary_max_chars})
    return World(app, summarizer, app.session(CAP))


@pytest.fixture
def world() -> World:
    return make_world()


class TimeBudget:
    """An invocation's ``time_left``: plenty for ``chunks`` summarizer calls, then too
    little to start another (the service asks once before each call)."""

    def __init__(self, chunks: int) -> None:
        self.left = chunks

    def __call__(self) -> float:
        self.left -= 1
        return 120.0 if self.left >= 0 else 5.0


# --- when a fold is due, and how far it goes ----------------------------------------


def test_given_nothing_omitted_even_a_turn_from_now_then_nothing_is_summarized(
    world: World,
) -> None:
    world.turns(1)  # 2 messages, and 4 after one more turn: all replayed

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "up_to_date" and outcome.target_seq == 0
    assert world.summarizer.calls == [] and world.summary() is None
    assert world.app.summary_queue.sent == []


def test_given_nothing_omitted_yet_but_a_turn_from_now_then_it_folds_ahead(world: World) -> None:
    world.turns(2)  # 4 messages, all replayed; one more turn would leave 1..2 out

    outcome = world.service().fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq) == ("caught_up", 4)
    assert world.summary_lines() == lines(1, 4)  # it may run ahead of the window


def test_given_a_summary_covering_the_next_two_windows_then_folding_again_is_a_no_op(
    world: World,
) -> None:
    world.turns(5)  # 10 messages: 1..6 omitted, 1..8 one turn from now
    before = world.set_summary(8)
    world.app.settle()

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "up_to_date" and outcome.through_seq == 8
    assert world.summarizer.calls == []
    assert world.summary() == before
    assert world.app.db.calls["advance_summary"] == 0


def test_given_no_summary_when_folding_then_everything_up_to_a_batch_ahead_is_folded(
    world: World,
) -> None:
    world.turns(5)  # 10 messages: 1..6 omitted; a batch ahead reaches past the newest

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "caught_up"
    assert (outcome.through_seq, outcome.target_seq, outcome.folded_messages) == (10, 10, 10)
    assert [c.previous for c in world.summarizer.calls] == [None]  # one call
    assert world.summarizer.calls[0].messages == [tuple(x.split(": ")) for x in lines(1, 10)]
    assert world.summary_lines() == lines(1, 10)
    assert world.app.metrics.counts["SummaryMessagesFolded"] == 10


def test_given_a_summary_when_a_fold_is_due_then_only_the_new_messages_are_folded_into_it(
    world: World,
) -> None:
    world.turns(3)
    world.set_summary(2)
    world.turns(2)  # 10 messages: 3..10 are new

    outcome = world.service().fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq) == ("caught_up", 10)
    (call,) = world.summarizer.calls
    assert call.previous == "\n".join(lines(1, 2))
    assert call.messages == [tuple(x.split(": ")) for x in lines(3, 10)]
    assert world.summary_lines() == lines(1, 10)


def test_with_a_wide_window_a_fold_runs_a_batch_of_turns_past_the_newest_omitted_message() -> None:
    world = make_world(summary_batch_turns=3)
    world.app.capability("cap_wide", replay={"maxMessages": 20, "maxChars": 100_000})
    sid = world.app.session("cap_wide")
    world.turns(12, sid)  # 24 messages: 1..4 omitted, 1..6 one turn from now
    world.session_id = sid
    world.set_summary(4)  # no gap now, but one a turn from now

    outcome = world.service(batch_turns=3).fold(WS, sid)

    # The newest omitted message (4) plus a batch of 3 turns: 6 messages ahead.
    assert (outcome.status, outcome.through_seq, outcome.target_seq) == ("caught_up", 10, 10)
    assert world.summary_lines() == lines(1, 10)
    # The batch's messages are still in the window it read: no second read for them.
    assert world.app.db.calls["read_messages"] == 0


def test_the_summary_covers_what_the_context_omits_under_a_char_budget(world: World) -> None:
    world.app.capability("cap_tight", replay={"maxMessages": 10, "maxChars": 25})
    sid = world.app.session("cap_tight")
    world.turns(3, sid)  # "question n" / "answer n": the budget replays the newest 2

    outcome = world.service().fold(WS, sid)

    context = world.app.container.sessions.context(WS, sid)
    assert context.omitted_messages == 4
    assert outcome.through_seq >= context.omitted_messages
    summary = world.summary(sid)
    assert summary is not None and summary.text.splitlines() == lines(1, outcome.through_seq)


# --- the time bound ----------------------------------------------------------------


def test_given_a_backlog_longer_than_the_invocation_then_it_stops_between_calls_and_enqueues_nothing(
    world: World,
) -> None:
    world.turns(252)  # 504 messages: 500 omitted
    service = world.service(chunk_messages=40)

    first = service.fold(WS, world.session_id, time_left=TimeBudget(10))

    assert first.status == "partial"
    assert len(world.summarizer.calls) == 10
    assert all(len(c.messages) <= 40 for c in world.summarizer.calls)
    assert first.through_seq == 400 and world.summary().through_seq == 400  # type: ignore[union-attr]
    assert world.app.summary_queue.sent == []  # the record's redelivery continues it

    second = service.fold(WS, world.session_id, time_left=TimeBudget(10))

    assert (second.status, second.through_seq, second.target_seq) == ("caught_up", 504, 504)
    assert [len(c.messages) for c in world.summarizer.calls[10:]] == [40, 40, 24]
    assert world.summary_lines() == lines(1, 504)


def test_given_little_time_left_when_folding_then_no_call_starts(world: World) -> None:
    world.turns(5)

    outcome = world.service(min_seconds_per_chunk=30).fold(
        WS, world.session_id, time_left=lambda: 12.0
    )

    assert outcome.status == "partial" and outcome.summarizer_calls == 0
    assert world.summary() is None
    assert world.app.summary_queue.sent == []


def test_without_a_time_bound_a_backlog_is_folded_in_one_job(world: World) -> None:
    world.turns(252)

    outcome = world.service(chunk_messages=40).fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq, outcome.summarizer_calls) == (
        "caught_up",
        504,
        13,
    )
    assert world.app.summary_queue.sent == []


# --- races -------------------------------------------------------------------------


def test_given_a_racing_job_moved_the_summary_when_storing_then_the_fold_continues_from_it(
    world: World,
) -> None:
    world.turns(5)  # a fold through 10 is due

    def rival_folds_first_three(call: int) -> None:
        if call == 1:
            # Another job stores 1..3 while this one is still summarizing 1..10.
            other = Summary(text="\n".join(lines(1, 3)), through_seq=3)
            assert world.app.db.stores.summaries.advance_summary(world.session_id, 0, other)

    world.summarizer.during_call = rival_folds_first_three

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.lost_races == 1 and outcome.through_seq == 10
    second = world.summarizer.calls[1]
    assert second.previous == "\n".join(lines(1, 3))
    assert second.messages == [tuple(x.split(": ")) for x in lines(4, 10)]
    assert world.summary_lines() == lines(1, 10)  # each message once, in order
    assert world.app.metrics.counts["SummaryRaceLost"] == 1


def test_given_a_racing_job_caught_up_first_when_storing_then_this_job_stops(
    world: World,
) -> None:
    world.turns(5)

    def rival_catches_up(call: int) -> None:
        if call == 1:
            world.set_summary(10)

    world.summarizer.during_call = rival_catches_up

    outcome = world.service().fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq, outcome.lost_races) == ("caught_up", 10, 1)
    assert len(world.summarizer.calls) == 1
    assert world.summary_lines() == lines(1, 10)
    assert world.app.summary_queue.sent == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(min_value=3, max_value=60),
    chunk=st.integers(min_value=1, max_value=17),
    rival_chunk=st.integers(min_value=1, max_value=17),
    interrupt_at=st.sets(st.integers(min_value=1, max_value=30), max_size=5),
    seeded=st.integers(min_value=0, max_value=10),
)
def test_interleaved_jobs_fold_every_message_exactly_once_in_order(
    turns: int, chunk: int, rival_chunk: int, interrupt_at: set[int], seeded: int
) -> None:
    world = make_world()
    world.turns(turns)
    target = 2 * turns  # the batch reaches past the newest message of this small window
    if seeded and seeded <= target - 4:
        world.set_summary(seeded)
    rival = world.rival(FakeSummarizer(), chunk_messages=rival_chunk)
    watermarks: list[int] = []

    def interleave(call: int) -> None:
        summary = world.summary()
        watermarks.append(summary.through_seq if summary else 0)
        if call in interrupt_at:
            # A rival job runs in between, for at most two calls of its own.
            rival.fold(WS, world.session_id, time_left=TimeBudget(2))

    world.summarizer.during_call = interleave
    service = world.service(chunk_messages=chunk)

    outcome = service.fold(WS, world.session_id)

    assert outcome.through_seq == target
    assert world.summary_lines() == lines(1, target)
    assert watermarks == sorted(watermarks)  # the watermark never moves backwards


# --- a conversation: one call per batch, never a gap -------------------------------


def converse(world: World, cap: str, turns: int, run_jobs: bool = True) -> list[int]:
    """Turns through the serving path at a human pace (the coalescing window passes
    between them); after each, the jobs it triggered run. Returns, per turn, how many
    omitted messages its prompt lacked from the summary (the gap)."""
    sid = world.session_id
    gaps: list[int] = []
    for i in range(1, turns + 1):
        prediction = predict(world.app.container, WS, cap, f"question {i}", sid)
        assert prediction.recorded and prediction.context is not None
        summary = world.summary()
        # The summary the turn read was at least this far (it only moves forward).
        covered = summary.through_seq if summary else 0
        gaps.append(max(0, prediction.context.omitted_messages - covered))
        world.app.clock.advance(30)
        if run_jobs:
            while world.app.summary_queue.sent:
                job, _ = world.app.summary_queue.sent.pop(0)
                world.service().fold(job["workspaceId"], job["sessionId"])
    return gaps


@pytest.mark.parametrize(("batch", "max_calls"), [(5, 50 // 5 + 2), (10, 50 // 10 + 2)])
def test_a_steady_conversation_makes_one_summary_call_per_batch_and_never_shows_a_gap(
    batch: int, max_calls: int
) -> None:
    world = make_world(summary_batch_turns=batch, summary_coalesce_seconds=0)
    world.app.capability("cap_default_window")  # replay defaults: 20 messages
    world.session_id = world.app.session("cap_default_window")

    gaps = converse(world, "cap_default_window", 50)

    assert gaps == [0] * 50
    assert len(world.summarizer.calls) <= max_calls
    # Each call folded a whole batch of turns (the first one a batch from the start).
    assert all(len(call.messages) >= 2 * batch for call in world.summarizer.calls)
    context = world.app.container.sessions.context(WS, world.session_id)
    assert world.summary().through_seq >= context.omitted_messages  # type: ignore[union-attr]


def test_after_a_burst_one_job_folds_everything_and_a_batch_ahead() -> None:
    world = make_world(summary_coalesce_seconds=10, summary_delay_seconds=10)
    world.app.capability("cap_default_window")
    world.session_id = world.app.session("cap_default_window")

    converse(world, "cap_default_window", 40, run_jobs=False)  # nothing ran meanwhile
    jobs = world.app.summary_queue.sent
    assert jobs  # the trigger asked for runs; none ran yet
    for job, _ in jobs:
        world.service().fold(job["workspaceId"], job["sessionId"])

    context = world.app.container.sessions.context(WS, world.session_id)
    summary = world.summary()
    assert context.omitted_messages == 60
    assert summary is not None and summary.through_seq == 70  # a batch of 5 turns ahead
    assert world.summary_lines() == lines(1, 70)
    # The first job folded it all; the others found nothing due.
    assert len(world.summarizer.calls) == 2  # 70 messages in calls of at most 40


# --- failures and missing things ---------------------------------------------------


def test_given_the_summarizer_fails_when_folding_then_it_raises_and_the_summary_stays(
    world: World,
) -> None:
    world.turns(3)
    before = world.set_summary(2)
    world.turns(2)
    world.summarizer.fail_with = ProviderError("model unavailable")

    with pytest.raises(ProviderError):
        world.service().fold(WS, world.session_id)

    assert world.summary() == before
    assert world.app.summary_queue.sent == []  # the queue retries the failed job itself


def test_given_the_outage_ends_when_folding_again_then_everything_omitted_is_caught_up(
    world: World,
) -> None:
    world.turns(3)
    world.summarizer.fail_with = ProviderError("model unavailable")
    with pytest.raises(ProviderError):
        world.service().fold(WS, world.session_id)
    world.turns(4)  # chat went on during the outage
    world.summarizer.fail_with = None

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.through_seq == 14
    assert world.summary_lines() == lines(1, 14)


@pytest.mark.parametrize("workspace", [WS, "ws_other"])
def test_given_no_such_session_in_the_workspace_when_folding_then_it_is_skipped(
    world: World, workspace: str
) -> None:
    world.turns(5)
    # The other workspace has a capability of the same id: only the session decides.
    world.app.capability(CAP, ws="ws_other")
    session_id = world.session_id if workspace != WS else "ses_missing"

    outcome = world.service().fold(workspace, session_id)

    assert outcome.status == "skipped"
    assert world.summarizer.calls == [] and world.summary() is None


@pytest.mark.parametrize("contents_deleted", [True, False], ids=["deleted", "deletion-begun"])
def test_given_a_deleted_session_when_folding_then_it_is_skipped(
    world: World, contents_deleted: bool
) -> None:
    world.turns(5)
    service = world.service()
    assert service.fold(WS, world.session_id).status == "caught_up"  # it knows the session
    world.turns(5)
    if contents_deleted:
        world.app.container.sessions.delete(WS, world.session_id)
    else:
        # Only marked deleted so far (the deletion was interrupted): already gone.
        world.app.db.fail_next["delete_contents"] = StoreUnavailable("throttled")
        with pytest.raises(StoreUnavailable):
            world.app.container.sessions.delete(WS, world.session_id)
    calls = len(world.summarizer.calls)

    outcome = service.fold(WS, world.session_id)

    assert outcome.status == "skipped"
    assert len(world.summarizer.calls) == calls
    assert world.app.summary_queue.sent == []


def test_given_an_archived_session_when_folding_then_it_is_skipped(world: World) -> None:
    world.turns(5)
    world.app.db.set_status(world.session_id, "archived")

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "skipped"
    assert world.summarizer.calls == [] and world.summary() is None
    assert world.app.summary_queue.sent == []


def test_given_a_message_missing_from_the_transcript_then_the_job_fails_rather_than_skip_it(
    world: World,
) -> None:
    world.turns(5)
    del world.app.db.turns[world.session_id][1]  # the turn holding messages 1 and 2

    with pytest.raises(TranscriptGap):
        world.service().fold(WS, world.session_id)

    assert world.summarizer.calls == [] and world.summary() is None


def test_max_chars_is_passed_to_the_summarizer_and_enforced() -> None:
    world = make_world(summary_max_chars=100)
    world.turns(5)
    world.summarizer.pad_to = 500  # a summarizer that ignores the limit

    world.service().fold(WS, world.session_id)

    assert [c.max_chars for c in world.summarizer.calls] == [100]
    summary = world.summary()
    assert summary is not None and summary.through_seq == 10 and len(summary.text) == 100


def test_given_the_sessions_capability_is_gone_when_folding_then_it_is_skipped(
    world: World,
) -> None:
    world.turns(5)
    world.app.db.heads[world.session_id]["capabilityId"] = "cap_gone"

    assert world.service().fold(WS, world.session_id).status == "skipped"
    assert world.summarizer.calls == []


def test_a_warm_worker_reads_the_session_head_once() -> None:
    world = make_world()
    world.turns(5)
    service = world.service()
    service.fold(WS, world.session_id)
    world.turns(5)
    world.app.settle()

    outcome = service.fold(WS, world.session_id)

    assert outcome.status == "caught_up"
    assert world.app.db.calls["get_session"] == 0  # the one state read checks it
    assert world.app.db.calls["load_turn_state"] == 1


def test_each_fold_reports_how_far_the_summary_lags_what_turns_leave_out(world: World) -> None:
    world.turns(5)  # 10 messages: the window replays 7..10, so 1..6 are left out
    world.set_summary(2)  # distant memory covers 1..2: 4 omitted messages unsummarized

    world.service().fold(WS, world.session_id)
    world.service().fold(WS, world.session_id)  # caught up now

    lags = [v for name, v, _ in world.app.metrics.events if name == "SummaryLagMessages"]
    assert lags == [4, 0]


# -- replay.alignment: the summary shown changes only when the window's start moves ------


def test_a_window_shows_the_oldest_version_made_before_it_that_covers_it() -> None:
    from convo_memory.domain.summary_plan import SummaryVersion, summary_for_window

    ten, twenty = Summary(text="e", through_seq=10), Summary(text="c", through_seq=20)
    # Folded ahead (in the window omitting 10) and in time (made before the windows).
    versions = [SummaryVersion(twenty, made_at_window=10), SummaryVersion(ten, 0)]

    assert summary_for_window(versions, 10, alignment=10) == ten
    assert summary_for_window(versions, 20, alignment=10) == twenty
    # The summarizer lags: the newest version made before the window, with a gap.
    assert summary_for_window(versions, 30, alignment=10) == twenty
    # Nothing omitted yet: none is shown.
    assert summary_for_window(versions, 0, alignment=10) is None
    # Alignment 1: the newest version, whenever it was made.
    assert summary_for_window(versions, 10, alignment=1) == twenty
    assert summary_for_window([], 10, alignment=10) is None


def test_a_version_made_while_a_window_is_current_waits_for_the_next_step() -> None:
    from convo_memory.domain.summary_plan import SummaryVersion, summary_for_window

    ten, twenty = Summary(text="e", through_seq=10), Summary(text="c", through_seq=20)
    # A late job folded through 20 while turns already showed the window omitting 20
    # (with the version through 10): those turns keep it until the window steps.
    late = [SummaryVersion(twenty, made_at_window=20), SummaryVersion(ten, 0)]
    assert summary_for_window(late, 20, alignment=10) == ten
    assert summary_for_window(late, 30, alignment=10) == twenty
    # A job so late that the window showed nothing: nothing until the next step.
    assert summary_for_window([SummaryVersion(twenty, 10)], 10, alignment=10) is None
    assert summary_for_window([SummaryVersion(twenty, 10)], 20, alignment=10) == twenty


@pytest.mark.parametrize("alignment", [10, 4, 1])
def test_with_an_aligned_window_folds_end_on_steps_and_the_shown_summary_moves_with_the_start(
    alignment: int,
) -> None:
    summarizer = FakeSummarizer()
    app = fake_app(
        provider=FakeProvider(lambda p: p.user_input.replace("question", "answer")),
        summarizer=summarizer,
    )
    app.capability(CAP, replay={"maxMessages": 10, "alignment": alignment})
    sid = app.session(CAP)
    seen: list[tuple[str, int]] = []

    for i in range(1, 31):
        prediction = predict(app.container, WS, CAP, f"question {i}", sid)
        assert prediction.context is not None
        omitted = prediction.context.omitted_messages
        system = app.provider.last_prompt.system
        through = re.findall(r'through-seq="(\d+)"', system)
        assert (int(through[0]) if through else 0) >= omitted  # no gap
        seen.append((system, omitted))
        # The job the trigger asks for (a no-op when no fold is due) runs before the next
        # turn, as at a human pace.
        app.container.summaries.fold(WS, sid)

    changed = [i for i in range(1, 30) if seen[i][0] != seen[i - 1][0]]
    moved = [i for i in range(1, 30) if seen[i][1] != seen[i - 1][1]]
    assert changed
    stored = app.db.summaries[sid]
    if alignment > 1:
        assert set(changed) <= set(moved)
        # Every fold ended on a step, and the version it replaced was kept.
        assert stored.through_seq % alignment == 0
        earlier = app.db.earlier_summaries[sid].summary
        assert earlier.through_seq % alignment == 0 and earlier.through_seq < stored.through_seq
    else:
        assert sid not in app.db.earlier_summaries  # nothing more is stored than before
    # GET context shows the summary the next turn will see.
    view = app.container.sessions.context(WS, sid)
    assert view.summary is not None and view.summary.through_seq >= view.omitted_messages


# -- ... whenever the summary jobs run -----------------------------------------------------

# When a job runs against the turn it is due at: before the turn reads the session,
# during the turn's model call (after its read), or around the turn, and around it and
# the next (the job reads the session, then one or two turns are served and land during
# the summarizer's call, then the job writes).
JOB_MOMENTS = ("before", "during", "around", "around two")


@dataclass
class JobTimetable:
    """A conversation whose summary jobs run ``delay`` turns after the turn that asked
    for them, at ``moment``: 40 turns of a window of 10 aligned to 10."""

    delay: int
    moment: str
    summarizer: FakeSummarizer = field(default_factory=FakeSummarizer)
    pending: list[int] = field(default_factory=list)  # the turn each job is due at
    ran: int = 0

    def __post_init__(self) -> None:
        self.app = fake_app(
            provider=FakeProvider(self._answer),
            summarizer=self.summarizer,
            # Every due turn sends its job: when it runs is the timetable's choice.
            summary_coalesce_seconds=0,
            summary_delay_seconds=0,
        )
        self.app.capability(CAP, replay={"maxMessages": 10, "alignment": 10})
        self.session_id = self.app.session(CAP)
        self.turn_index = 0
        self.omitted: list[int] = []
        self.served: set[int] = set()  # turns served inside a summarizer call

    def _answer(self, prompt: Any) -> str:
        if self.moment == "during":
            self._run_due()
        return prompt.user_input.replace("question", "answer")

    def _run_due(self) -> None:
        due = [t for t in self.pending if t <= self.turn_index]
        self.pending = [t for t in self.pending if t > self.turn_index]
        for _ in due:
            self.app.container.summaries.fold(WS, self.session_id)
            self.ran += 1

    def _turn(self) -> None:
        sent = len(self.app.summary_queue.sent)
        prediction = predict(
            self.app.container, WS, CAP, f"question {self.turn_index}", self.session_id
        )
        assert prediction.context is not None and prediction.recorded
        self.omitted.append(prediction.context.omitted_messages)
        asked = len(self.app.summary_queue.sent) - sent
        self.pending += [self.turn_index + 1 + self.delay] * asked

    def converse(self, turns: int = 40) -> list[Any]:
        for self.turn_index in range(turns):
            if self.moment == "before":
                self._run_due()
            elif self.moment.startswith("around") and self._due():
                if self._served_around(2 if self.moment == "around two" else 1, turns):
                    continue
            elif self.turn_index in self.served:
                continue
            self._turn()
        return self.app.provider.prompts

    def _due(self) -> bool:
        return any(t <= self.turn_index for t in self.pending)

    def _served_around(self, count: int, turns: int) -> bool:
        """Run the due jobs, serving this turn (and the next ``count - 1``) inside the
        first summarizer call; whether the turn was served so."""
        first = self.turn_index

        def serve(_call: int) -> None:
            if first in self.served:
                return
            for index in range(first, min(first + count, turns)):
                self.turn_index = index
                self.served.add(index)
                self._turn()
            self.turn_index = first

        self.summarizer.during_call = serve
        self._run_due()
        self.summarizer.during_call = None
        return first in self.served


def extends(previous: Any, current: Any) -> bool:
    """Whether a prompt is the previous one plus its answer and a new input."""
    return (
        current.system == previous.system
        and current.messages[: len(previous.messages)] == previous.messages
        and len(current.messages) == len(previous.messages) + 2
    )


@pytest.mark.parametrize("moment", JOB_MOMENTS)
@pytest.mark.parametrize("delay", range(8))
def test_whenever_summary_jobs_land_every_turn_between_steps_extends_the_previous_prompt(
    delay: int, moment: str
) -> None:
    timetable = JobTimetable(delay, moment)

    prompts = timetable.converse(40)

    omitted = timetable.omitted
    assert len(prompts) == 40 and timetable.ran > 0 and timetable.summarizer.calls
    steps = [i for i in range(1, 40) if omitted[i] != omitted[i - 1]]
    assert steps == [i for i in range(6, 40, 5)]  # the window of 10 steps every 5 turns
    for i in range(1, 40):
        if i not in steps:
            assert extends(prompts[i - 1], prompts[i]), (i, omitted[i])
    # The summary does reach the prompts (from the step after a late job on).
    shown = [re.findall(r'through-seq="(\d+)"', p.system) for p in prompts]
    assert any(shown[30:])
    if delay == 0 and moment == "before":
        # Jobs in time: no turn lacks an omitted message.
        assert all(int(s[0]) >= o for s, o in zip(shown, omitted, strict=True) if o)
