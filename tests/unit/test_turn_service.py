"""The serving path (TurnService, with its Answerer, TurnRecorder and SummaryTrigger)
wired by the composition root over fakes: every door, every refusal, the one write a
turn makes (and the coarse activity mark), and the failure paths that must not fail the
turn, including the repair of a turn whose write failed."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import pytest

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    StoreRejected,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.jobs import RepairJob
from convo_memory.domain.models import ReplayPolicy, Summary, ToolSpec, iso, parse_iso
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.tools import ToolCall
from convo_memory.domain.turn_records import AppendResult, TurnRecord
from convo_memory.doors.predict import prediction as answer_json
from convo_memory.edge.turn_edge import BufferedEvents
from convo_memory.services.recording import RecordingPolicy
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import deltas, predict, session_message

OTHER_WS = "ws_beta"
WITHHELD = "[withheld by policy]"
FLAGGED_ANSWER = "here is the forbidden recipe"
PRINCIPAL = {"tenant_id": "t-1", "user_id": "u-7"}
GRANULARITY = 3_600  # the default ACTIVITY_GRANULARITY_SECONDS
COALESCE = 10  # SUMMARY_COALESCE_SECONDS (and the trigger's queue delay) in this harness


def build(
    *, provider: FakeProvider | None = None, with_repair_queue: bool = True, **settings: Any
) -> FakeApp:
    """The application over fakes: inputs up to 200 characters, digests kept one hour,
    summary triggers coalesced for 10 seconds (and delayed as long)."""
    values: dict[str, Any] = {
        "max_input_chars": 200,
        "digest_retention_hours": 1,
        "summary_coalesce_seconds": COALESCE,
        "summary_delay_seconds": COALESCE,
    }
    values.update(settings)
    return fake_app(provider=provider, with_repair_queue=with_repair_queue, **values)


def predict_unrecorded(h: FakeApp, session_id: str, text: str) -> Any:
    """A turn whose transcript write fails on every attempt the turn makes: answered
    with ``recorded: false`` and handed to the repair paths."""
    h.db.fail_always["append_turn"] = StoreUnavailable("throttled")
    try:
        return predict(h.container, WS, "cap-gen", text, session_id)
    finally:
        del h.db.fail_always["append_turn"]


def small_replay(max_messages: int = 4, max_chars: int = 10_000, min_messages: int = 1) -> dict:
    return {
        "replay": {
            "maxMessages": max_messages,
            "maxChars": max_chars,
            "minMessages": min_messages,
        }
    }


def filtered() -> dict:
    return {
        "contentFilter": {
            "type": "embedded",
            "blockedTerms": ["forbidden"],
            "withheldMessage": WITHHELD,
        }
    }


def chat(h: FakeApp, session_id: str) -> list[ChatMessage]:
    return [ChatMessage(m.role, m.content) for m in h.db.messages_of(session_id)]


def prompt_text(prompt: Prompt) -> str:
    """Everything the model reads: the system text, then every message."""
    return "\n\n".join([prompt.system, *(m.content for m in prompt.messages)])


def fenced(prompt: Prompt, kind: str) -> list[str]:
    """Bodies of the prompt's real data fences of one kind (a digest travels in the
    message after its answer)."""
    nonce = re.escape(prompt.fence_nonce)
    pattern = re.compile(rf'<data-{nonce} kind="{kind}"[^>\n]*>\n(.*?)\n</data-{nonce}>', re.DOTALL)
    return pattern.findall(prompt_text(prompt))


def set_activity_mark(h: FakeApp, session_id: str, seconds_before_now: float) -> str:
    """Place the head's coarse activity mark ``seconds_before_now`` before the app's clock."""
    mark = iso(datetime.fromtimestamp(h.clock.now - seconds_before_now, UTC))
    h.db.heads[session_id]["lastActiveAt"] = mark
    return mark


# -- stateless and recorded turns ---------------------------------------------------


def test_given_no_session_when_predicting_then_the_answer_is_stateless_and_nothing_is_stored():
    h = build()
    h.capability("cap-gen")
    h.settle()

    prediction = predict(h.container, WS, "cap-gen", "hello there", None)

    assert prediction.output == "the answer"
    assert answer_json(prediction) == {
        "output": "the answer",
        "withheld": False,
        "sessionId": None,
        "turn": None,
        "recorded": False,
        "runId": None,
        "context": None,
    }
    assert h.db.writes() == 0
    assert h.db.heads == {} and h.db.turns == {}
    assert h.provider.last_prompt.messages == (ChatMessage("user", "hello there"),)
    assert h.summary_queue.sent == [] and h.repair_queue.sent == []


def test_given_a_session_when_predicting_then_the_user_message_and_answer_are_recorded_in_order():
    h = build(provider=FakeProvider(lambda p: f"answer to {p.user_input}"))
    h.capability("cap-gen")
    sid = h.session("cap-gen")

    first = predict(h.container, WS, "cap-gen", "first question", sid)
    second = predict(h.container, WS, "cap-gen", "second question", sid)

    assert first.recorded and second.recorded
    assert first.session_id == sid
    assert first.turn is not None and second.turn is not None
    assert (first.turn.user_seq, first.turn.assistant_seq) == (1, 2)
    assert (second.turn.user_seq, second.turn.assistant_seq) == (3, 4)
    assert [(m.seq, m.role, m.content) for m in h.db.messages_of(sid)] == [
        (1, "user", "first question"),
        (2, "assistant", "answer to first question"),
        (3, "user", "second question"),
        (4, "assistant", "answer to second question"),
    ]
    # Each turn is one stored record, at the position of its user message.
    assert sorted(h.db.turns[sid]) == [1, 3]
    assert h.container.sessions.get(WS, sid).message_count == 4
    # The second turn replayed the whole first turn.
    assert second.context is not None
    assert asdict(second.context) == {
        "replayed_messages": 2,
        "replayed_chars": len("first question") + len("answer to first question"),
        "omitted_messages": 0,
        "summary_included": False,
    }


def test_given_a_long_history_when_predicting_then_the_context_counts_match_the_replay_window():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=4))
    sid = h.session("cap-gen")
    for i in range(5):
        h.db.add_turn(sid, f"question {i}", f"answer {i}" * (i + 1))
    history = h.db.messages_of(sid)

    prediction = predict(h.container, WS, "cap-gen", "one more", sid)

    window = select_replay_window(history, ReplayPolicy(max_messages=4, max_chars=10_000))
    assert prediction.context is not None
    assert prediction.context.replayed_messages == len(window.messages) == 4
    assert prediction.context.omitted_messages == window.omitted_messages == 6
    assert prediction.context.replayed_chars == window.replayed_chars
    assert prediction.turn is not None
    assert (prediction.turn.user_seq, prediction.turn.assistant_seq) == (11, 12)


@pytest.mark.parametrize(
    ("replay", "expected_seqs"),
    [
        (small_replay(max_messages=4), [7, 8, 9, 10]),  # the ceiling cuts
        (small_replay(max_messages=4, max_chars=25), [9, 10]),  # the budget cuts
        (small_replay(max_messages=4, max_chars=1, min_messages=3), [8, 9, 10]),  # the floor
    ],
)
def test_given_a_small_replay_policy_when_predicting_then_the_model_sees_exactly_window_and_input(
    replay: dict, expected_seqs: list[int]
) -> None:
    h = build()
    h.capability("cap-gen", instructions="Be brief.", **replay)
    sid = h.session("cap-gen")
    for i in range(1, 6):
        h.db.add_turn(sid, f"q{i} " + "u" * 8, f"a{i} " + "a" * 8)  # 11 chars each
    by_seq = {m.seq: m for m in h.db.messages_of(sid)}

    predict(h.container, WS, "cap-gen", "the new input", sid)

    prompt = h.provider.last_prompt
    assert prompt.messages == (
        *(ChatMessage(by_seq[s].role, by_seq[s].content) for s in expected_seqs),
        ChatMessage("user", "the new input"),
    )
    assert prompt.system.startswith("Be brief.")
    assert all(by_seq[s].content not in prompt.system for s in by_seq)


# -- one write per turn: the coarse activity mark ------------------------------------


def test_given_a_recent_activity_mark_when_a_turn_lands_then_it_reads_once_and_writes_one_record():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    mark = set_activity_mark(h, sid, seconds_before_now=60)
    h.settle()

    prediction = predict(h.container, WS, "cap-gen", "hello", sid)

    assert prediction.recorded is True
    # One bounded read and one conditional put: no head write, no digest, no marker.
    assert h.db.calls == Counter({"load_turn_state": 1, "append_turn": 1})
    assert h.db.writes() == 1
    assert h.db.heads[sid]["lastActiveAt"] == mark
    # The session still reports its exact count and last turn.
    assert h.container.sessions.get(WS, sid).message_count == 2


def test_given_an_activity_mark_older_than_the_granularity_when_a_turn_arrives_then_it_moves_first():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "old question", "old answer")
    old_mark = set_activity_mark(h, sid, seconds_before_now=GRANULARITY)
    touches_seen_by_the_model: list[int] = []

    def answer(prompt: Prompt) -> str:
        touches_seen_by_the_model.append(h.db.calls["touch"])
        return "the answer"

    h.provider.text = answer
    h.settle()

    predict(h.container, WS, "cap-gen", "hello again", sid)

    # The mark moved once, before the model was asked.
    assert touches_seen_by_the_model == [1]
    assert h.db.calls["touch"] == 1 and h.db.calls["append_turn"] == 1
    new_mark = h.db.heads[sid]["lastActiveAt"]
    assert new_mark != old_mark
    assert len(h.db.messages_of(sid)) == 4

    # Within the granularity of the new mark, a turn moves nothing.
    h.clock.now = parse_iso(new_mark) + GRANULARITY - 1
    predict(h.container, WS, "cap-gen", "and again", sid)
    assert h.db.calls["touch"] == 1 and h.db.calls["append_turn"] == 2

    # Once the granularity has passed, the next turn moves it again.
    h.clock.now = parse_iso(new_mark) + GRANULARITY
    predict(h.container, WS, "cap-gen", "much later", sid)
    assert h.db.calls["touch"] == 2 and h.db.calls["append_turn"] == 3


@pytest.mark.parametrize(
    ("moved_to", "refusal"), [("archived", SessionArchived), ("deleting", SessionNotFound)]
)
def test_given_the_session_is_archived_or_deleted_after_the_read_when_marking_then_no_model_call(
    monkeypatch: pytest.MonkeyPatch, moved_to: str, refusal: type[Exception]
) -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    set_activity_mark(h, sid, seconds_before_now=2 * GRANULARITY)
    sessions = h.db.stores.sessions
    touch = sessions.touch

    def retention_gets_there_first(session_id: str, last_active_at: str) -> None:
        # The retention run (or a DELETE) lands between the turn's read and its mark.
        h.db.set_status(session_id, moved_to)
        touch(session_id, last_active_at)

    monkeypatch.setattr(sessions, "touch", retention_gets_there_first)

    with pytest.raises(refusal):
        predict(h.container, WS, "cap-gen", "hello", sid)

    assert h.provider.prompts == []
    assert h.db.calls["append_turn"] == 0 and h.db.messages_of(sid) == []


# -- refusals ----------------------------------------------------------------------


def test_given_a_classic_capability_when_predicting_with_a_session_then_it_is_refused_first():
    h = build()
    h.capability("cap-classic", kind="classic")
    h.capability("cap-gen")
    other_capabilitys_session = h.session("cap-gen")
    h.settle()

    # Classic is checked before any mismatch, and before the session is even looked up.
    for session_id in (other_capabilitys_session, "ses_does_not_exist"):
        with pytest.raises(CapabilityNotConversational):
            predict(h.container, WS, "cap-classic", "hello", session_id)

    assert h.db.calls == Counter()
    assert h.db.messages_of(other_capabilitys_session) == []
    assert h.provider.prompts == []


def test_given_a_session_of_capability_b_when_predicting_on_capability_a_then_it_is_a_mismatch():
    h = build()
    h.capability("cap-a")
    h.capability("cap-b")
    sid = h.session("cap-b")
    h.settle()

    with pytest.raises(SessionCapabilityMismatch):
        predict(h.container, WS, "cap-a", "hello", sid)

    assert h.db.writes() == 0
    assert h.provider.prompts == []


def test_given_an_archived_session_when_a_turn_arrives_at_either_door_then_it_is_refused():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "old question", "old answer")
    h.db.set_status(sid, "archived")
    h.settle()

    with pytest.raises(SessionArchived):
        predict(h.container, WS, "cap-gen", "hello", sid)
    with pytest.raises(SessionArchived):
        session_message(h.container, WS, sid, "hello")

    assert h.db.writes() == 0
    assert len(h.db.messages_of(sid)) == 2
    assert h.provider.prompts == []


def test_given_another_workspaces_session_when_predicting_then_it_is_not_found():
    h = build()
    h.capability("cap-gen", ws=WS)
    h.capability("cap-gen", ws=OTHER_WS)  # the same capability id exists in both
    sid = h.session("cap-gen", ws=WS)
    h.settle()

    with pytest.raises(SessionNotFound):
        predict(h.container, OTHER_WS, "cap-gen", "hello", sid)
    with pytest.raises(SessionNotFound):
        session_message(h.container, OTHER_WS, sid, "hello")
    with pytest.raises(SessionNotFound):
        predict(h.container, WS, "cap-gen", "hello", "ses_missing")

    assert h.db.writes() == 0
    assert h.provider.prompts == []


def test_given_a_session_used_by_its_owner_when_another_workspace_posts_to_it_then_it_is_missing():
    # A foreign session must look exactly like a missing one (same 404 code), however
    # warm the container is. The messages door remembers session -> capability per
    # container; that memory must not answer for another workspace.
    h = build()
    h.capability("cap_owner_only", ws=WS)
    sid = h.session("cap_owner_only", ws=WS)
    session_message(h.container, WS, sid, "warm the container")
    h.settle()

    with pytest.raises(Exception) as foreign:
        session_message(h.container, OTHER_WS, sid, "probe")
    with pytest.raises(Exception) as missing:
        session_message(h.container, OTHER_WS, "ses_missing", "probe")

    assert isinstance(missing.value, SessionNotFound)
    assert isinstance(foreign.value, SessionNotFound), (
        f"another workspace's session answered {type(foreign.value).__name__}: "
        f"{foreign.value} (distinguishable from a missing session, and names the "
        "owner's capability)"
    )
    assert h.db.writes() == 0


@pytest.mark.parametrize("door", ["stateless", "predict", "messages"])
def test_given_an_input_over_the_limit_when_a_turn_arrives_then_payload_too_large(door: str):
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.settle()
    too_long = "x" * 201

    with pytest.raises(PayloadTooLarge):
        if door == "stateless":
            predict(h.container, WS, "cap-gen", too_long, None)
        elif door == "predict":
            predict(h.container, WS, "cap-gen", too_long, sid)
        else:
            session_message(h.container, WS, sid, too_long)

    assert h.db.writes() == 0
    assert h.provider.prompts == []
    # The limit itself is allowed.
    assert predict(h.container, WS, "cap-gen", "x" * 200, sid).recorded


@pytest.mark.parametrize("empty", ["", "   ", "\n\t"])
def test_given_an_empty_input_when_a_turn_arrives_then_it_is_a_validation_error(empty: str):
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.settle()

    with pytest.raises(ValidationFailed):
        predict(h.container, WS, "cap-gen", empty, sid)
    with pytest.raises(ValidationFailed):
        session_message(h.container, WS, sid, empty)
    with pytest.raises(ValidationFailed):
        predict(h.container, WS, "cap-gen", empty, None)

    assert h.db.writes() == 0
    assert h.provider.prompts == []


# -- the transcript write failing, and its repair ------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        StoreUnavailable("throttled"),
        StoreRejected("item size has exceeded the maximum allowed size"),
        RuntimeError("an error nobody listed"),
    ],
    ids=["unavailable", "refused", "unexpected"],
)
def test_given_the_store_fails_on_append_when_predicting_then_answer_is_served_and_repair_queued(
    failure: Exception,
) -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.db.fail_always["append_turn"] = failure  # every attempt within the turn fails

    prediction = predict(h.container, WS, "cap-gen", "remember this", sid)
    del h.db.fail_always["append_turn"]

    assert prediction.output == "the answer"
    assert prediction.recorded is False
    assert prediction.turn is None
    assert prediction.session_id == sid
    assert prediction.context is not None
    assert h.db.messages_of(sid) == []
    assert len(h.repair_queue.bodies) == 1
    body = RepairJob.model_validate(h.repair_queue.bodies[0]).to_body()
    assert body["workspaceId"] == WS
    assert body["sessionId"] == sid
    assert body["position"] == 1
    assert body["turn"]["turnId"]
    assert body["turn"]["userContent"] == "remember this"
    assert body["turn"]["answer"] == "the answer"
    assert body["turn"]["withheld"] is False
    assert h.metrics.counts["TranscriptWriteFailed"] == 1
    # No summary is requested for a turn that has not landed.
    assert h.summary_queue.sent == []


def test_given_a_queued_repair_when_it_is_applied_twice_then_the_turn_is_recorded_once():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    predict_unrecorded(h, sid, "remember this")
    record = RepairJob.model_validate(h.repair_queue.bodies[0]).turn.record()

    first = h.db.stores.turns.append_turn(sid, 0, record)
    again = h.db.stores.turns.append_turn(sid, 0, record)

    assert (first.user_seq, first.assistant_seq, first.already_recorded) == (1, 2, False)
    assert (again.user_seq, again.assistant_seq, again.already_recorded) == (1, 2, True)
    assert chat(h, sid) == [
        ChatMessage("user", "remember this"),
        ChatMessage("assistant", "the answer"),
    ]


def test_given_a_queued_repair_when_the_consumer_delivers_it_twice_then_it_lands_once_in_order():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    predict_unrecorded(h, sid, "remember this")
    h.db.add_turn(sid, "a later question", "a later answer")  # landed meanwhile
    body = h.repair_queue.bodies[0]

    first = h.container.recorder.repair(body)
    again = h.container.recorder.repair(body)

    assert (first, again) == ("recorded", "already_recorded")
    assert [(m.seq, m.content) for m in h.db.messages_of(sid)] == [
        (1, "a later question"),
        (2, "a later answer"),
        (3, "remember this"),
        (4, "the answer"),
    ]
    assert h.metrics.counts["TranscriptRepaired"] == 1


def test_given_a_repair_lands_a_turn_then_it_asks_for_a_summary_run_once() -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    predict_unrecorded(h, sid, "remember this")
    body = h.repair_queue.bodies[0]
    assert h.summary_queue.sent == []

    h.container.recorder.repair(body)
    h.container.recorder.repair(body)  # a second delivery lands nothing, asks nothing

    assert [job for job, _delay in h.summary_queue.sent] == [{"workspaceId": WS, "sessionId": sid}]


def test_given_the_write_landed_before_its_timeout_when_the_repair_runs_then_it_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    turns = h.db.stores.turns
    append_turn = turns.append_turn

    def lands_then_times_out(session_id: str, after_seq: int, turn: TurnRecord) -> AppendResult:
        append_turn(session_id, after_seq, turn)
        raise StoreUnavailable("read timeout: the put landed, its answer did not")

    def unreadable(session_id: str, turn_id: str, from_seq: int) -> None:
        raise StoreUnavailable("the turn's own retries cannot look either")

    monkeypatch.setattr(turns, "append_turn", lands_then_times_out)
    monkeypatch.setattr(turns, "find_turn", unreadable)
    prediction = predict(h.container, WS, "cap-gen", "did it land?", sid)
    assert prediction.recorded is False and len(h.repair_queue.bodies) == 1
    monkeypatch.undo()
    h.settle()

    outcome = h.container.recorder.repair(h.repair_queue.bodies[0])

    assert outcome == "already_recorded"
    assert h.db.writes() == 0
    assert chat(h, sid) == [
        ChatMessage("user", "did it land?"),
        ChatMessage("assistant", "the answer"),
    ]
    assert h.metrics.counts["TranscriptRepaired"] == 0


def test_given_the_write_landed_before_its_timeout_then_the_turns_retry_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    turns = h.db.stores.turns
    append_turn = turns.append_turn
    calls = {"append": 0}

    def lands_then_times_out(session_id: str, after_seq: int, turn: TurnRecord) -> AppendResult:
        calls["append"] += 1
        append_turn(session_id, after_seq, turn)
        raise StoreUnavailable("read timeout: the put landed, its answer did not")

    monkeypatch.setattr(turns, "append_turn", lands_then_times_out)
    prediction = predict(h.container, WS, "cap-gen", "did it land?", sid)

    assert prediction.recorded is True and prediction.turn is not None
    assert (prediction.turn.user_seq, prediction.turn.assistant_seq) == (1, 2)
    assert calls["append"] == 1  # found where it landed, not written again
    assert h.repair_queue.bodies == []
    assert chat(h, sid) == [
        ChatMessage("user", "did it land?"),
        ChatMessage("assistant", "the answer"),
    ]
    assert h.metrics.counts["TranscriptWriteRetried"] == 1


def test_given_a_write_fails_once_then_the_turn_retries_it_and_queues_nothing() -> None:
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.db.fail_next["append_turn"] = StoreUnavailable("throttled")

    prediction = predict(h.container, WS, "cap-gen", "remember this", sid)

    assert prediction.recorded is True
    assert h.repair_queue.bodies == []
    assert chat(h, sid)[0] == ChatMessage("user", "remember this")
    assert h.metrics.counts["TranscriptWriteFailed"] == 0  # it was recorded after all
    assert h.metrics.counts["TranscriptWriteRetried"] == 1


def test_given_a_turn_the_store_refuses_for_good_when_repairing_then_it_is_counted_and_dropped():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    predict_unrecorded(h, sid, "remember this")
    h.db.fail_next["append_turn"] = StoreRejected("item size has exceeded the maximum")

    outcome = h.container.recorder.repair(h.repair_queue.bodies[0])

    # Dropped rather than raised: it would only cycle through the queue into its DLQ.
    assert outcome == "unlandable"
    assert h.metrics.counts["TranscriptRepairFailed"] == 1
    assert h.db.messages_of(sid) == []


def test_given_a_repair_that_is_throttled_when_repairing_then_it_raises_for_the_queue_to_retry():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    predict_unrecorded(h, sid, "remember this")
    body = h.repair_queue.bodies[0]
    h.db.fail_next["append_turn"] = StoreUnavailable("still throttled")

    with pytest.raises(StoreUnavailable):
        h.container.recorder.repair(body)

    assert h.container.recorder.repair(body) == "recorded"
    assert chat(h, sid)[0] == ChatMessage("user", "remember this")


def test_given_the_repair_queue_also_fails_when_predicting_then_the_answer_is_still_returned():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.repair_queue.fail_with = StoreUnavailable("SQS down")

    prediction = predict_unrecorded(h, sid, "remember this")

    assert prediction.output == "the answer"
    assert prediction.recorded is False
    assert prediction.turn is None
    # Each path is tried a few times (then the repair function, when one is configured).
    assert h.repair_queue.attempts == RecordingPolicy().handoff_attempts
    assert h.metrics.counts["TranscriptWriteFailed"] == 1
    assert h.metrics.counts["TranscriptRepairEnqueueFailed"] == 1
    assert h.metrics.counts["TranscriptLost"] == 1


def test_given_no_repair_queue_when_the_append_fails_then_the_answer_is_still_returned():
    h = build(with_repair_queue=False)
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    prediction = predict_unrecorded(h, sid, "remember this")

    assert (prediction.output, prediction.recorded) == ("the answer", False)
    assert h.metrics.counts["TranscriptRepairEnqueueFailed"] == 1


def test_given_a_racing_turn_lands_first_when_recording_then_the_answer_follows_its_own_question():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.db.before_append = lambda db: db.add_turn(sid, "racing question", "racing answer")

    prediction = predict(h.container, WS, "cap-gen", "my question", sid)

    assert prediction.turn is not None
    assert (prediction.turn.user_seq, prediction.turn.assistant_seq) == (3, 4)
    assert h.db.position_conflicts == 1
    assert chat(h, sid) == [
        ChatMessage("user", "racing question"),
        ChatMessage("assistant", "racing answer"),
        ChatMessage("user", "my question"),
        ChatMessage("assistant", "the answer"),
    ]


# -- content filter and streaming --------------------------------------------------


def test_given_a_filter_that_blocks_when_predicting_then_withheld_message_is_served_and_stored():
    h = build(provider=FakeProvider(FLAGGED_ANSWER))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen")

    prediction = predict(h.container, WS, "cap-gen", "tell me a recipe", sid)

    assert prediction.output == WITHHELD
    assert prediction.withheld is True
    assert prediction.recorded is True
    answer = h.db.messages_of(sid)[-1]
    assert (answer.role, answer.content, answer.withheld) == ("assistant", WITHHELD, True)
    assert h.db.messages_of(sid)[0].withheld is False
    assert FLAGGED_ANSWER not in h.db.dump()
    assert h.content_filter.checked == [FLAGGED_ANSWER]
    assert h.metrics.counts["AnswersWithheld"] == 1


def test_given_a_filter_that_allows_when_predicting_then_the_answer_is_served_unchanged():
    h = build(provider=FakeProvider("a harmless answer"))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen")

    prediction = predict(h.container, WS, "cap-gen", "hello", sid)

    assert (prediction.output, prediction.withheld) == ("a harmless answer", False)
    assert h.db.messages_of(sid)[-1].withheld is False
    assert h.content_filter.checked == ["a harmless answer"]


@pytest.mark.parametrize("with_session", [True, False])
def test_given_no_filter_when_streaming_then_the_sink_receives_the_model_deltas(
    with_session: bool,
) -> None:
    h = build(provider=FakeProvider(chunks=["Hel", "lo ", "there"]))
    h.capability("cap-gen")
    sid = h.session("cap-gen") if with_session else None
    events = BufferedEvents()

    prediction = predict(h.container, WS, "cap-gen", "hi", sid, events=events)

    assert deltas(events) == ["Hel", "lo ", "there"]
    assert prediction.output == "Hello there"
    # One model call, streamed (a tool-calling model is given the turn's time left).
    assert len(h.provider.steps) == 1 and h.provider.steps[0].tools == ()
    assert h.provider.complete_calls == 0
    if sid is not None:
        assert h.db.messages_of(sid)[-1].content == "Hello there"


@pytest.mark.parametrize("with_session", [True, False])
def test_given_a_filter_when_streaming_a_flagged_answer_then_only_withheld_text_reaches_the_sink(
    with_session: bool,
) -> None:
    h = build(provider=FakeProvider(FLAGGED_ANSWER, chunks=["here is the ", "forbidden recipe"]))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen") if with_session else None
    events = BufferedEvents()

    prediction = predict(h.container, WS, "cap-gen", "hi", sid, events=events)

    assert deltas(events) == [WITHHELD]
    assert (prediction.output, prediction.withheld) == (WITHHELD, True)
    assert all("forbidden" not in delta for delta in deltas(events))
    assert h.provider.stream_calls == 0
    assert FLAGGED_ANSWER not in h.db.dump()


def test_given_a_filter_when_streaming_an_allowed_answer_then_the_sink_gets_the_final_text_once():
    h = build(provider=FakeProvider("all good here", chunks=["all ", "good ", "here"]))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen")
    events = BufferedEvents()

    prediction = session_message(h.container, WS, sid, "hi", events=events)

    assert deltas(events) == ["all good here"]
    assert prediction.output == "all good here"
    assert h.provider.stream_calls == 0


# -- agents: runs and tool digests -------------------------------------------------

LOOKUP = ToolCall("lookup_order", {"order": "42"}, "order 42 shipped; ETA Tuesday")


def agent_app(provider: FakeProvider | None = None, **capability: Any) -> FakeApp:
    h = build(provider=provider or FakeProvider("Your order ships Tuesday", tool_calls=[LOOKUP]))
    h.capability(
        "cap-agent",
        kind="agent",
        tools=[ToolSpec(name="lookup_order").model_dump()],
        **capability,
    )
    return h


def test_given_an_agent_turn_with_tool_calls_when_recorded_then_digest_and_run_trace_are_kept():
    h = agent_app()
    sid = h.session("cap-agent", principal=PRINCIPAL)
    h.settle()

    prediction = predict(h.container, WS, "cap-agent", "where is order 42?", sid)

    assert prediction.turn is not None
    assistant_seq = prediction.turn.assistant_seq
    digests = h.db.digests_of(sid)
    assert list(digests) == [assistant_seq]
    digest, expires_at = digests[assistant_seq]
    assert digest.tools == ["lookup_order"]
    assert digest.text == build_tool_digest([LOOKUP], 2_000)
    assert expires_at == int(h.clock.now + 3_600)
    # The turn's record, its digest (its own item: the turn called tools) and the trace.
    assert (h.db.calls["append_turn"], h.db.calls["put_digest"], h.db.calls["put_run"]) == (
        1,
        1,
        1,
    )
    # The run trace: who the tools acted for, and what they did.
    assert prediction.run_id is not None
    run = h.db.stores.runs.get_run(WS, prediction.run_id)
    assert run is not None
    assert run["sessionId"] == sid
    assert run["capabilityId"] == "cap-agent"
    assert run["principal"] == PRINCIPAL
    assert run["output"] == "Your order ships Tuesday"
    assert [(s["tool"], s["input"], s["output"], s["principal"]) for s in run["steps"]] == [
        ("lookup_order", {"order": "42"}, "order 42 shipped; ETA Tuesday", PRINCIPAL)
    ]
    assert h.db.run_id_of(sid, assistant_seq) == prediction.run_id
    assert h.db.stores.runs.get_run(OTHER_WS, prediction.run_id) is None


def test_given_a_withheld_agent_answer_when_recorded_then_no_digest_is_stored():
    h = agent_app(FakeProvider(FLAGGED_ANSWER, tool_calls=[LOOKUP]), **filtered())
    sid = h.session("cap-agent")

    prediction = predict(h.container, WS, "cap-agent", "where is order 42?", sid)

    assert (prediction.output, prediction.withheld, prediction.recorded) == (WITHHELD, True, True)
    # The digest could hold what the filter caught: none is stored, none is replayed.
    assert h.db.digests_of(sid) == {}
    assert h.db.calls["put_digest"] == 0
    assert h.container.sessions.context(WS, sid).tool_digests == ()
    h.provider.text, h.provider.tool_calls = "fine", ()
    predict(h.container, WS, "cap-agent", "and when does it arrive?", sid)
    assert fenced(h.provider.last_prompt, "tool-results") == []
    assert LOOKUP.output not in prompt_text(h.provider.last_prompt)


def test_given_the_digest_write_fails_when_recording_then_the_turn_is_still_recorded():
    h = agent_app()
    sid = h.session("cap-agent")
    h.db.fail_next["put_digest"] = StoreUnavailable("throttled")

    prediction = predict(h.container, WS, "cap-agent", "where is order 42?", sid)

    assert prediction.recorded is True and prediction.turn is not None
    assert len(h.db.messages_of(sid)) == 2
    assert h.db.digests_of(sid) == {}
    assert h.metrics.counts["DigestWriteFailed"] == 1
    assert h.repair_queue.sent == []


def test_given_a_digest_when_the_next_turn_replays_its_answer_then_the_digest_is_fenced_data():
    h = agent_app()
    sid = h.session("cap-agent", principal=PRINCIPAL)
    predict(h.container, WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()

    h.clock.advance(60)
    predict(h.container, WS, "cap-agent", "and when does it arrive?", sid)

    prompt = h.provider.last_prompt
    assert fenced(prompt, "tool-results") == [build_tool_digest([LOOKUP], 2_000)]
    # v3: the digest travels with its turn (at the head of the message after its answer),
    # so the system text does not change when a tool turn lands.
    assert LOOKUP.output not in prompt.system
    assert 'seq="2"' in prompt.messages[-1].content
    assert prompt.messages[-1].content.endswith("\n\nand when does it arrive?")
    nonce = re.escape(prompt.fence_nonce)
    outside = [
        re.sub(rf"<data-{nonce} .*?</data-{nonce}>", "", m.content, flags=re.S)
        for m in prompt.messages
    ]
    assert all(LOOKUP.output not in content for content in outside)


def test_given_a_digest_past_its_retention_when_the_next_turn_runs_then_it_is_not_replayed():
    h = agent_app()
    sid = h.session("cap-agent")
    predict(h.container, WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()

    h.clock.advance(3_600 + 1)
    predict(h.container, WS, "cap-agent", "and when does it arrive?", sid)

    prompt = h.provider.last_prompt
    # The answer is still replayed, the expired digest (still stored: TTL is lazy) is not.
    assert ChatMessage("assistant", "Your order ships Tuesday") in prompt.messages
    assert 2 in h.db.digests_of(sid)
    assert fenced(prompt, "tool-results") == []
    assert LOOKUP.output not in prompt_text(prompt)


def test_given_a_digest_whose_answer_left_the_window_when_the_next_turn_runs_then_not_replayed():
    h = agent_app(**small_replay(max_messages=2))
    sid = h.session("cap-agent")
    predict(h.container, WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()
    predict(h.container, WS, "cap-agent", "thanks", sid)
    assert len(fenced(h.provider.last_prompt, "tool-results")) == 1

    predict(h.container, WS, "cap-agent", "anything else?", sid)

    assert fenced(h.provider.last_prompt, "tool-results") == []


# -- summary trigger ---------------------------------------------------------------


def test_given_the_window_is_about_to_omit_when_turns_arrive_then_one_summary_run_per_window():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=4))
    sid = h.session("cap-gen")
    set_activity_mark(h, sid, seconds_before_now=0)
    h.settle()

    predict(h.container, WS, "cap-gen", "turn one", sid)
    assert h.summary_queue.sent == []  # two turns from now nothing is omitted yet

    h.clock.advance(1)
    # Nothing is omitted yet, but one more turn would leave messages 1-2 out: the run is
    # asked for a turn early, so it has a turn's interval to fold ahead.
    predict(h.container, WS, "cap-gen", "turn two", sid)
    # Delayed at least as long as the coalescing window: the run sees the coalesced turns.
    assert h.summary_queue.sent == [({"workspaceId": WS, "sessionId": sid}, COALESCE)]

    h.clock.advance(5)
    predict(h.container, WS, "cap-gen", "turn three", sid)  # within the coalescing window
    assert len(h.summary_queue.sent) == 1

    h.clock.advance(COALESCE)
    predict(h.container, WS, "cap-gen", "turn four", sid)  # the window has passed
    assert len(h.summary_queue.sent) == 2

    # A trigger writes nothing: every write of these four turns was the turn itself.
    assert h.db.writes() == h.db.calls["append_turn"] == 4


def test_given_a_summary_folded_ahead_when_turns_arrive_then_none_is_requested_until_it_runs_short():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=4))
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "q1", "a1")
    h.db.add_turn(sid, "q2", "a2")
    summaries = h.db.stores.summaries
    # Folded ahead: it covers messages the window still replays.
    assert summaries.advance_summary(sid, 0, Summary(text="q1 and q2 were asked", through_seq=4))

    covered = predict(h.container, WS, "cap-gen", "q3", sid)  # afterwards 1-2 omitted
    assert h.summary_queue.sent == []  # and one turn later 1-4: still covered
    assert covered.context is not None and covered.context.summary_included is True
    assert fenced(h.provider.last_prompt, "summary") == ["q1 and q2 were asked"]

    predict(h.container, WS, "cap-gen", "q4", sid)  # one turn later 1-6: 5-6 uncovered
    assert h.summary_queue.bodies == [{"workspaceId": WS, "sessionId": sid}]


@pytest.mark.parametrize("answer_chars", [10, 400])
def test_under_a_character_budget_the_trigger_projects_the_next_turn_from_this_one(
    answer_chars: int,
) -> None:
    # A budget of 500 characters and no message ceiling to speak of: whether one more
    # turn like this one pushes messages out depends on this turn's size.
    h = build(provider=FakeProvider("a" * answer_chars))
    h.capability("cap-gen", **small_replay(max_messages=50, max_chars=500))
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "q" * 10, "a" * 10)

    predict(h.container, WS, "cap-gen", "q" * 10, sid)

    # 40 characters of history + 10 + answer: the next window still holds everything
    # either way, but a second 400-character answer would push the oldest ones out.
    assert len(h.summary_queue.sent) == (1 if answer_chars == 400 else 0)


def test_given_a_summary_is_due_when_the_transcript_write_fails_then_no_summary_is_requested():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "q1", "a1")
    prediction = predict_unrecorded(h, sid, "q2")  # would omit 1-2

    assert prediction.recorded is False
    assert h.summary_queue.sent == []
    assert len(h.repair_queue.sent) == 1


def test_given_the_summary_queue_fails_when_a_summary_is_due_then_the_next_turn_sends_it():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")
    h.db.add_turn(sid, "q1", "a1")
    h.summary_queue.fail_with = StoreUnavailable("SQS down")

    prediction = predict(h.container, WS, "cap-gen", "q2", sid)

    assert prediction.recorded is True
    assert prediction.output == "the answer"
    assert h.summary_queue.attempts == 1 and h.summary_queue.sent == []
    assert h.metrics.counts["SummaryEnqueueFailed"] == 1
    assert len(h.db.messages_of(sid)) == 4

    # Nothing was marked as sent, so the next turn (even inside the coalescing window)
    # sends the trigger the queue did not take.
    h.summary_queue.fail_with = None
    h.clock.advance(1)
    predict(h.container, WS, "cap-gen", "q3", sid)

    assert h.summary_queue.attempts == 2
    assert h.summary_queue.bodies == [{"workspaceId": WS, "sessionId": sid}]


# -- the messages door -------------------------------------------------------------


def test_given_the_session_messages_door_when_conversing_then_it_records_exactly_like_predict():
    h = build(provider=FakeProvider(lambda p: f"echo {p.user_input} after {len(p.messages)}"))
    h.capability("cap-gen", **small_replay(max_messages=2))
    via_predict = h.session("cap-gen")
    via_messages = h.session("cap-gen")
    inputs = ["one", "two", "three"]

    predicted = [predict(h.container, WS, "cap-gen", text, via_predict) for text in inputs]
    prompts_predict = h.provider.prompts[:]
    h.provider.prompts.clear()
    messaged = [session_message(h.container, WS, via_messages, text) for text in inputs]

    assert chat(h, via_predict) == chat(h, via_messages)
    assert len(chat(h, via_messages)) == 6
    assert [p.messages for p in h.provider.prompts] == [p.messages for p in prompts_predict]
    for a, b in zip(predicted, messaged, strict=True):
        assert answer_json(a) == {**answer_json(b), "sessionId": a.session_id}
        assert b.session_id == via_messages


def test_given_an_unknown_session_when_posting_a_message_then_it_is_not_found():
    h = build()
    h.capability("cap-gen")

    with pytest.raises(SessionNotFound):
        session_message(h.container, WS, "ses_missing", "hello")
    assert h.provider.prompts == []
