"""The rolling-summary fold (SummaryService) over fakes, wired by the composition root
(or by hand with the same stores where a test needs another work bound): what it folds,
the watermark rules (never twice, never skipped, never backwards), the work bound, which
sessions it skips, and when it re-enqueues itself."""

from __future__ import annotations

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

WS = "ws_alpha"
CAP = "cap_chat"
# maxMessages 4, a budget that never binds: the newest 4 messages are replayed, so
# after n messages the newest omitted seq is n - 4.
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
            queue=self.app.summary_queue,
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


# --- what is folded ----------------------------------------------------------------


def test_given_nothing_omitted_when_folding_then_nothing_is_summarized(world: World) -> None:
    world.turns(2)  # 4 messages, all replayed

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "up_to_date" and outcome.target_seq == 0
    assert world.summarizer.calls == [] and world.summary() is None
    assert world.app.summary_queue.sent == []


def test_given_a_caught_up_summary_when_folding_again_then_it_is_a_no_op(world: World) -> None:
    world.turns(5)  # 10 messages: 1..6 omitted
    before = world.set_summary(6)
    world.app.settle()

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "up_to_date" and outcome.through_seq == 6
    assert world.summarizer.calls == []
    assert world.summary() == before
    assert world.app.db.calls["advance_summary"] == 0
    assert world.app.summary_queue.sent == []  # a job with nothing to do ends its chain


def test_given_no_summary_when_folding_then_exactly_the_omitted_messages_are_folded(
    world: World,
) -> None:
    world.turns(5)  # 10 messages: the window replays 7..10, so 1..6 are omitted

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "caught_up"
    assert (outcome.through_seq, outcome.target_seq, outcome.folded_messages) == (6, 6, 6)
    assert [c.previous for c in world.summarizer.calls] == [None]
    assert world.summarizer.calls[0].messages == [tuple(x.split(": ")) for x in lines(1, 6)]
    summary = world.summary()
    assert summary is not None and summary.through_seq == 6
    assert world.summary_lines() == lines(1, 6)
    assert world.app.metrics.counts["SummaryMessagesFolded"] == 6


def test_given_a_summary_when_more_is_omitted_then_only_the_new_messages_are_folded_into_it(
    world: World,
) -> None:
    world.turns(3)
    world.set_summary(2)
    world.turns(2)  # 10 messages: 3..6 are newly omitted

    outcome = world.service().fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq) == ("caught_up", 6)
    (call,) = world.summarizer.calls
    assert call.previous == "\n".join(lines(1, 2))
    assert call.messages == [tuple(x.split(": ")) for x in lines(3, 6)]
    assert world.summary_lines() == lines(1, 6)


def test_the_summary_covers_what_the_context_omits_under_a_char_budget(world: World) -> None:
    world.app.capability("cap_tight", replay={"maxMessages": 10, "maxChars": 25})
    sid = world.app.session("cap_tight")
    world.turns(3, sid)  # "question n" / "answer n": the budget replays the newest 2

    outcome = world.service().fold(WS, sid)

    context = world.app.container.sessions.context(WS, sid)
    assert context.omitted_messages == 4
    assert outcome.through_seq == context.omitted_messages
    summary = world.summary(sid)
    assert summary is not None and summary.text.splitlines() == lines(1, 4)


# --- bounded work ------------------------------------------------------------------


def test_given_a_large_backlog_when_folding_then_chunks_are_bounded_and_the_job_continues(
    world: World,
) -> None:
    world.turns(252)  # 504 messages: 500 omitted
    service = world.service(chunk_messages=40, max_chunks_per_run=10)

    first = service.fold(WS, world.session_id)

    assert first.status == "partial"
    assert len(world.summarizer.calls) == 10
    assert all(len(c.messages) <= 40 for c in world.summarizer.calls)
    assert first.through_seq == 400 and world.summary().through_seq == 400  # type: ignore[union-attr]
    assert world.app.summary_queue.sent == [({"workspaceId": WS, "sessionId": world.session_id}, 0)]

    second = service.fold(WS, world.session_id)

    assert (second.status, second.through_seq, second.target_seq) == ("caught_up", 500, 500)
    assert [len(c.messages) for c in world.summarizer.calls[10:]] == [40, 40, 20]
    assert world.summary_lines() == lines(1, 500)


def test_given_little_time_left_when_folding_then_no_chunk_starts_and_the_job_continues(
    world: World,
) -> None:
    world.turns(5)

    outcome = world.service(min_seconds_per_chunk=30).fold(
        WS, world.session_id, time_left=lambda: 12.0
    )

    assert outcome.status == "partial" and outcome.summarizer_calls == 0
    assert world.summary() is None
    assert world.app.summary_queue.sent == [({"workspaceId": WS, "sessionId": world.session_id}, 0)]


# --- races -------------------------------------------------------------------------


def test_given_a_racing_job_moved_the_summary_when_storing_then_the_fold_continues_from_it(
    world: World,
) -> None:
    world.turns(5)  # 1..6 omitted

    def rival_folds_first_three(call: int) -> None:
        if call == 1:
            # Another job stores 1..3 while this one is still summarizing 1..6.
            other = Summary(text="\n".join(lines(1, 3)), through_seq=3)
            assert world.app.db.stores.summaries.advance_summary(world.session_id, 0, other)

    world.summarizer.during_call = rival_folds_first_three

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.lost_races == 1 and outcome.through_seq == 6
    second = world.summarizer.calls[1]
    assert second.previous == "\n".join(lines(1, 3))
    assert second.messages == [tuple(x.split(": ")) for x in lines(4, 6)]
    assert world.summary_lines() == lines(1, 6)  # each message once, in order
    assert world.app.metrics.counts["SummaryRaceLost"] == 1


def test_given_a_racing_job_caught_up_first_when_storing_then_this_job_stops(
    world: World,
) -> None:
    world.turns(5)

    def rival_catches_up(call: int) -> None:
        if call == 1:
            world.set_summary(6)

    world.summarizer.during_call = rival_catches_up

    outcome = world.service().fold(WS, world.session_id)

    assert (outcome.status, outcome.through_seq, outcome.lost_races) == ("caught_up", 6, 1)
    assert len(world.summarizer.calls) == 1
    assert world.summary_lines() == lines(1, 6)
    assert world.app.summary_queue.sent == []  # the job that folded owns the follow-up


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(min_value=3, max_value=60),
    chunk=st.integers(min_value=1, max_value=17),
    rival_chunk=st.integers(min_value=1, max_value=17),
    interrupt_at=st.sets(st.integers(min_value=1, max_value=30), max_size=5),
    seeded=st.integers(min_value=0, max_value=10),
)
def test_interleaved_jobs_fold_every_omitted_message_exactly_once_in_order(
    turns: int, chunk: int, rival_chunk: int, interrupt_at: set[int], seeded: int
) -> None:
    world = make_world()
    world.turns(turns)
    target = 2 * turns - 4
    if seeded and seeded <= target:
        world.set_summary(seeded)
    rival = world.rival(FakeSummarizer(), chunk_messages=rival_chunk, max_chunks_per_run=2)
    watermarks: list[int] = []

    def interleave(call: int) -> None:
        summary = world.summary()
        watermarks.append(summary.through_seq if summary else 0)
        if call in interrupt_at:
            rival.fold(WS, world.session_id)  # a rival job runs in between

    world.summarizer.during_call = interleave
    service = world.service(chunk_messages=chunk, max_chunks_per_run=1000)

    outcome = service.fold(WS, world.session_id)

    assert outcome.through_seq == target
    assert world.summary_lines() == lines(1, target)
    assert watermarks == sorted(watermarks)  # the watermark never moves backwards


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

    assert outcome.through_seq == 10
    assert world.summary_lines() == lines(1, 10)


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
    if contents_deleted:
        world.app.container.sessions.delete(WS, world.session_id)
    else:
        # Only marked deleted so far (the deletion was interrupted): already gone.
        world.app.db.fail_next["delete_contents"] = StoreUnavailable("throttled")
        with pytest.raises(StoreUnavailable):
            world.app.container.sessions.delete(WS, world.session_id)
    assert len(world.app.db.messages_of(world.session_id)) == (0 if contents_deleted else 10)

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "skipped"
    assert world.summarizer.calls == [] and world.app.db.summaries == {}
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
    assert summary is not None and summary.through_seq == 6 and len(summary.text) == 100


# --- follow-up jobs ----------------------------------------------------------------


def test_given_turns_land_while_folding_then_a_follow_up_job_is_enqueued(world: World) -> None:
    world.turns(5)  # 1..6 omitted
    world.summarizer.during_call = lambda call: world.turns(2) if call == 1 else None

    outcome = world.service(continue_delay_seconds=1).fold(WS, world.session_id)

    assert outcome.through_seq == 6  # the target seen at the start
    assert outcome.requeue_delay == 1
    assert world.app.summary_queue.sent == [({"workspaceId": WS, "sessionId": world.session_id}, 1)]

    follow_up = world.service().fold(WS, world.session_id)

    assert follow_up.through_seq == 10 and world.summary_lines() == lines(1, 10)


def test_given_triggers_coalesced_by_the_serving_path_when_the_job_runs_then_it_folds_them_too():
    world = make_world(summary_coalesce_seconds=10, summary_delay_seconds=10)
    turns = world.app.container.turns
    for i in range(1, 4):
        turns.predict(WS, CAP, f"question {i}", world.session_id)  # turn 3 omits 1..2
    world.app.clock.advance(3)
    turns.predict(WS, CAP, "question 4", world.session_id)  # omits 3..4: coalesced away
    (job, delay), *others = world.app.summary_queue.sent
    assert others == [] and job == {"workspaceId": WS, "sessionId": world.session_id}
    # The job is delayed at least as long as the coalescing window ...
    assert delay >= world.app.container.settings.summary_coalesce_seconds

    world.app.clock.advance(delay - 3)
    outcome = world.service().fold(job["workspaceId"], job["sessionId"])

    # ... so the run it starts folds the coalesced turn's omitted messages as well, and
    # with nothing landing meanwhile, no trailing job follows.
    assert (outcome.status, outcome.through_seq, outcome.requeue_delay) == ("caught_up", 4, None)
    assert world.summary_lines() == lines(1, 4)
    assert len(world.app.summary_queue.sent) == 1


def test_given_nothing_landed_while_folding_when_caught_up_then_no_follow_up(
    world: World,
) -> None:
    world.turns(5)

    outcome = world.service().fold(WS, world.session_id)

    assert outcome.status == "caught_up" and outcome.requeue_delay is None
    assert world.app.summary_queue.sent == []


def test_given_an_enqueue_failure_when_continuing_then_the_job_fails_for_a_retry(
    world: World,
) -> None:
    world.turns(30)
    world.app.summary_queue.fail_with = RuntimeError("SQS unavailable")

    with pytest.raises(RuntimeError, match="SQS unavailable"):
        world.service(chunk_messages=10, max_chunks_per_run=2).fold(WS, world.session_id)

    assert world.summary().through_seq == 20  # type: ignore[union-attr]  # progress is kept


def test_given_the_sessions_capability_is_gone_when_folding_then_it_is_skipped(
    world: World,
) -> None:
    world.turns(5)
    world.app.db.heads[world.session_id]["capabilityId"] = "cap_gone"

    assert world.service().fold(WS, world.session_id).status == "skipped"
    assert world.summarizer.calls == []
