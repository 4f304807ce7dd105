"""The serving path (TurnService) with in-memory fakes: every door, every refusal, and
the failure paths that must not fail the turn."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from convo_memory.domain.errors import (
    CapabilityNotConversational,
    PayloadTooLarge,
    SessionArchived,
    SessionCapabilityMismatch,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.models import (
    Capability,
    CapabilityCreate,
    ReplayPolicy,
    SessionCreate,
    Summary,
    ToolSpec,
)
from convo_memory.domain.prompt import ChatMessage, Prompt
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.domain.tool_digest import build_tool_digest
from convo_memory.domain.turn_records import TurnRecord
from convo_memory.ports import ContentFilter, ToolCall
from convo_memory.services.catalog import CapabilityCatalog
from convo_memory.services.sessions import SessionService
from convo_memory.services.turns import TurnPolicy, TurnService
from tests.fakes.in_memory_store import (
    FakeClock,
    FakeContentFilter,
    FakeMetrics,
    FakeProvider,
    FakeQueue,
    InMemoryStore,
)

WS = "ws_alpha"
OTHER_WS = "ws_beta"
WITHHELD = "[withheld by policy]"
FLAGGED_ANSWER = "here is the forbidden recipe"
PRINCIPAL = {"tenant_id": "t-1", "user_id": "u-7"}


@dataclass
class Harness:
    """TurnService wired like ``bootstrap.build_container`` does, but with fakes."""

    store: InMemoryStore
    catalog: CapabilityCatalog
    sessions: SessionService
    turns: TurnService
    provider: FakeProvider
    content_filter: FakeContentFilter
    summary_queue: FakeQueue
    repair_queue: FakeQueue
    metrics: FakeMetrics
    clock: FakeClock
    sinks: dict[str, list[str]] = field(default_factory=dict)

    def capability(self, cap_id: str, kind: str = "generative", ws: str = WS, **extra: Any) -> str:
        body = CapabilityCreate.model_validate({"name": cap_id, "kind": kind, **extra})
        self.catalog.create(ws, body, cap_id=cap_id)
        return cap_id

    def session(self, cap_id: str, ws: str = WS, principal: dict[str, str] | None = None) -> str:
        body = SessionCreate(capability_id=cap_id, external_ref="end-user-1", principal=principal)
        return self.sessions.create(ws, body).id

    def settle(self) -> None:
        """Forget the set-up's store calls so a test counts only its own."""
        self.store.calls.clear()


def build(
    *,
    provider: FakeProvider | None = None,
    blocked: tuple[str, ...] = ("forbidden",),
    policy: TurnPolicy | None = None,
    with_repair_queue: bool = True,
) -> Harness:
    store = InMemoryStore()
    clock = FakeClock()
    catalog = CapabilityCatalog(store, cache_ttl_seconds=30, clock=clock)
    provider = provider or FakeProvider("the answer")
    content_filter = FakeContentFilter(blocked)
    summary_queue, repair_queue, metrics = FakeQueue(), FakeQueue(), FakeMetrics()

    def filter_for(capability: Capability) -> ContentFilter | None:
        # As bootstrap's provider cache: a filter only for capabilities that configure one.
        return content_filter if capability.content_filter is not None else None

    turns = TurnService(
        store=store,
        catalog=catalog,
        provider_for=lambda capability: provider,
        filter_for=filter_for,
        summary_queue=summary_queue,
        repair_queue=repair_queue if with_repair_queue else None,
        policy=policy
        or TurnPolicy(
            max_input_chars=200,
            digest_max_chars=2_000,
            digest_retention_seconds=3_600,
            summary_coalesce_seconds=10,
            summary_delay_seconds=1,
        ),
        metrics=metrics,
        clock=clock,
    )
    return Harness(
        store=store,
        catalog=catalog,
        sessions=SessionService(store, catalog),
        turns=turns,
        provider=provider,
        content_filter=content_filter,
        summary_queue=summary_queue,
        repair_queue=repair_queue,
        metrics=metrics,
        clock=clock,
    )


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


def chat(h: Harness, session_id: str) -> list[ChatMessage]:
    return [ChatMessage(m.role, m.content) for m in h.store.messages_of(session_id)]


def fenced(prompt: Prompt, kind: str) -> list[str]:
    """Bodies of the prompt's real data fences of one kind."""
    nonce = re.escape(prompt.fence_nonce)
    pattern = re.compile(rf'<data-{nonce} kind="{kind}"[^>\n]*>\n(.*?)\n</data-{nonce}>', re.DOTALL)
    return pattern.findall(prompt.system)


# -- stateless and recorded turns ---------------------------------------------------


def test_given_no_session_when_predicting_then_the_answer_is_stateless_and_nothing_is_stored():
    h = build()
    h.capability("cap-gen")
    h.settle()

    prediction = h.turns.predict(WS, "cap-gen", "hello there", None)

    assert prediction.output == "the answer"
    assert prediction.to_json_dict() == {
        "output": "the answer",
        "withheld": False,
        "sessionId": None,
        "turn": None,
        "recorded": False,
        "runId": None,
        "context": None,
    }
    assert h.store.writes() == 0
    assert h.store.partitions == {}
    assert h.provider.last_prompt.messages == (ChatMessage("user", "hello there"),)
    assert h.summary_queue.sent == [] and h.repair_queue.sent == []


def test_given_a_session_when_predicting_then_the_user_message_and_answer_are_recorded_in_order():
    h = build(provider=FakeProvider(lambda p: f"answer to {p.user_input}"))
    h.capability("cap-gen")
    sid = h.session("cap-gen")

    first = h.turns.predict(WS, "cap-gen", "first question", sid)
    second = h.turns.predict(WS, "cap-gen", "second question", sid)

    assert first.recorded and second.recorded
    assert first.session_id == sid
    assert first.turn is not None and second.turn is not None
    assert (first.turn.user_seq, first.turn.assistant_seq) == (1, 2)
    assert (second.turn.user_seq, second.turn.assistant_seq) == (3, 4)
    assert [(m.seq, m.role, m.content) for m in h.store.messages_of(sid)] == [
        (1, "user", "first question"),
        (2, "assistant", "answer to first question"),
        (3, "user", "second question"),
        (4, "assistant", "answer to second question"),
    ]
    assert h.sessions.get(WS, sid).message_count == 4
    # The second turn replayed the whole first turn.
    assert second.context is not None
    assert second.context.model_dump() == {
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
        h.store.add_turn(sid, f"question {i}", f"answer {i}" * (i + 1))
    history = h.store.messages_of(sid)

    prediction = h.turns.predict(WS, "cap-gen", "one more", sid)

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
        h.store.add_turn(sid, f"q{i} " + "u" * 8, f"a{i} " + "a" * 8)  # 11 chars each
    by_seq = {m.seq: m for m in h.store.messages_of(sid)}

    h.turns.predict(WS, "cap-gen", "the new input", sid)

    prompt = h.provider.last_prompt
    assert prompt.messages == (
        *(ChatMessage(by_seq[s].role, by_seq[s].content) for s in expected_seqs),
        ChatMessage("user", "the new input"),
    )
    assert prompt.system.startswith("Be brief.")
    assert all(by_seq[s].content not in prompt.system for s in by_seq)


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
            h.turns.predict(WS, "cap-classic", "hello", session_id)

    assert h.store.writes() == 0
    assert h.store.messages_of(other_capabilitys_session) == []
    assert h.provider.prompts == []


def test_given_a_session_of_capability_b_when_predicting_on_capability_a_then_it_is_a_mismatch():
    h = build()
    h.capability("cap-a")
    h.capability("cap-b")
    sid = h.session("cap-b")
    h.settle()

    with pytest.raises(SessionCapabilityMismatch):
        h.turns.predict(WS, "cap-a", "hello", sid)

    assert h.store.writes() == 0
    assert h.provider.prompts == []


def test_given_an_archived_session_when_a_turn_arrives_at_either_door_then_it_is_refused():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.store.add_turn(sid, "old question", "old answer")
    h.store.set_status(sid, "archived")
    h.settle()

    with pytest.raises(SessionArchived):
        h.turns.predict(WS, "cap-gen", "hello", sid)
    with pytest.raises(SessionArchived):
        h.turns.session_message(WS, sid, "hello")

    assert h.store.writes() == 0
    assert len(h.store.messages_of(sid)) == 2
    assert h.provider.prompts == []


def test_given_another_workspaces_session_when_predicting_then_it_is_not_found():
    h = build()
    h.capability("cap-gen", ws=WS)
    h.capability("cap-gen", ws=OTHER_WS)  # the same capability id exists in both
    sid = h.session("cap-gen", ws=WS)
    h.settle()

    with pytest.raises(SessionNotFound):
        h.turns.predict(OTHER_WS, "cap-gen", "hello", sid)
    with pytest.raises(SessionNotFound):
        h.turns.session_message(OTHER_WS, sid, "hello")
    with pytest.raises(SessionNotFound):
        h.turns.predict(WS, "cap-gen", "hello", "ses_missing")

    assert h.store.writes() == 0
    assert h.provider.prompts == []


def test_given_a_session_used_by_its_owner_when_another_workspace_posts_to_it_then_it_is_missing():
    # A foreign session must look exactly like a missing one (same 404 code), however
    # warm the container is. The messages door remembers session -> capability per
    # container; that memory must not answer for another workspace.
    h = build()
    h.capability("cap_owner_only", ws=WS)
    sid = h.session("cap_owner_only", ws=WS)
    h.turns.session_message(WS, sid, "warm the container")
    h.settle()

    with pytest.raises(Exception) as foreign:
        h.turns.session_message(OTHER_WS, sid, "probe")
    with pytest.raises(Exception) as missing:
        h.turns.session_message(OTHER_WS, "ses_missing", "probe")

    assert isinstance(missing.value, SessionNotFound)
    assert isinstance(foreign.value, SessionNotFound), (
        f"another workspace's session answered {type(foreign.value).__name__}: "
        f"{foreign.value} (distinguishable from a missing session, and names the "
        "owner's capability)"
    )
    assert h.store.writes() == 0


@pytest.mark.parametrize("door", ["stateless", "predict", "messages"])
def test_given_an_input_over_the_limit_when_a_turn_arrives_then_payload_too_large(door: str):
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.settle()
    too_long = "x" * 201

    with pytest.raises(PayloadTooLarge):
        if door == "stateless":
            h.turns.predict(WS, "cap-gen", too_long, None)
        elif door == "predict":
            h.turns.predict(WS, "cap-gen", too_long, sid)
        else:
            h.turns.session_message(WS, sid, too_long)

    assert h.store.writes() == 0
    assert h.provider.prompts == []
    # The limit itself is allowed.
    assert h.turns.predict(WS, "cap-gen", "x" * 200, sid).recorded


@pytest.mark.parametrize("empty", ["", "   ", "\n\t"])
def test_given_an_empty_input_when_a_turn_arrives_then_it_is_a_validation_error(empty: str):
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.settle()

    with pytest.raises(ValidationFailed):
        h.turns.predict(WS, "cap-gen", empty, sid)
    with pytest.raises(ValidationFailed):
        h.turns.session_message(WS, sid, empty)
    with pytest.raises(ValidationFailed):
        h.turns.predict(WS, "cap-gen", empty, None)

    assert h.store.writes() == 0
    assert h.provider.prompts == []


# -- the transcript write failing --------------------------------------------------


def test_given_the_store_fails_on_append_when_predicting_then_answer_is_served_and_repair_queued():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.store.fail_next_append = StoreUnavailable("throttled")

    prediction = h.turns.predict(WS, "cap-gen", "remember this", sid)

    assert prediction.output == "the answer"
    assert prediction.recorded is False
    assert prediction.turn is None
    assert prediction.session_id == sid
    assert prediction.context is not None
    assert h.store.messages_of(sid) == []
    assert len(h.repair_queue.bodies) == 1
    body = h.repair_queue.bodies[0]
    assert body["workspaceId"] == WS
    assert body["sessionId"] == sid
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
    h.store.fail_next_append = StoreUnavailable("throttled")
    h.turns.predict(WS, "cap-gen", "remember this", sid)
    queued = h.repair_queue.bodies[0]["turn"]
    record = TurnRecord(
        turn_id=queued["turnId"],
        user_content=queued["userContent"],
        answer=queued["answer"],
        withheld=queued["withheld"],
        created_at=queued["createdAt"],
    )

    first = h.store.append_turn(sid, 0, record)
    again = h.store.append_turn(sid, 0, record)

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
    h.store.fail_next_append = StoreUnavailable("throttled")
    h.turns.predict(WS, "cap-gen", "remember this", sid)
    h.store.add_turn(sid, "a later question", "a later answer")  # landed meanwhile
    body = h.repair_queue.bodies[0]

    first = h.turns.repair(body)
    again = h.turns.repair(body)

    assert (first, again) == ("recorded", "already_recorded")
    assert [(m.seq, m.content) for m in h.store.messages_of(sid)] == [
        (1, "a later question"),
        (2, "a later answer"),
        (3, "remember this"),
        (4, "the answer"),
    ]


def test_given_the_repair_queue_also_fails_when_predicting_then_the_answer_is_still_returned():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.store.fail_next_append = StoreUnavailable("throttled")
    h.repair_queue.fail_with = StoreUnavailable("SQS down")

    prediction = h.turns.predict(WS, "cap-gen", "remember this", sid)

    assert prediction.output == "the answer"
    assert prediction.recorded is False
    assert prediction.turn is None
    assert h.repair_queue.attempts == 1
    assert h.metrics.counts["TranscriptWriteFailed"] == 1
    assert h.metrics.counts["TranscriptRepairEnqueueFailed"] == 1


def test_given_no_repair_queue_when_the_append_fails_then_the_answer_is_still_returned():
    h = build(with_repair_queue=False)
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.store.fail_next_append = StoreUnavailable("throttled")

    prediction = h.turns.predict(WS, "cap-gen", "remember this", sid)

    assert (prediction.output, prediction.recorded) == ("the answer", False)
    assert h.metrics.counts["TranscriptRepairEnqueueFailed"] == 1


def test_given_a_racing_turn_lands_first_when_recording_then_the_answer_follows_its_own_question():
    h = build()
    h.capability("cap-gen")
    sid = h.session("cap-gen")
    h.store.before_append = lambda store: store.add_turn(sid, "racing question", "racing answer")

    prediction = h.turns.predict(WS, "cap-gen", "my question", sid)

    assert prediction.turn is not None
    assert (prediction.turn.user_seq, prediction.turn.assistant_seq) == (3, 4)
    assert h.store.race_retries == 1
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

    prediction = h.turns.predict(WS, "cap-gen", "tell me a recipe", sid)

    assert prediction.output == WITHHELD
    assert prediction.withheld is True
    assert prediction.recorded is True
    answer = h.store.messages_of(sid)[-1]
    assert (answer.role, answer.content, answer.withheld) == ("assistant", WITHHELD, True)
    assert h.store.messages_of(sid)[0].withheld is False
    assert FLAGGED_ANSWER not in h.store.dump()
    assert h.content_filter.checked == [FLAGGED_ANSWER]
    assert h.metrics.counts["AnswersWithheld"] == 1


def test_given_a_filter_that_allows_when_predicting_then_the_answer_is_served_unchanged():
    h = build(provider=FakeProvider("a harmless answer"))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen")

    prediction = h.turns.predict(WS, "cap-gen", "hello", sid)

    assert (prediction.output, prediction.withheld) == ("a harmless answer", False)
    assert h.store.messages_of(sid)[-1].withheld is False
    assert h.content_filter.checked == ["a harmless answer"]


@pytest.mark.parametrize("with_session", [True, False])
def test_given_no_filter_when_streaming_then_the_sink_receives_the_model_deltas(
    with_session: bool,
) -> None:
    h = build(provider=FakeProvider(chunks=["Hel", "lo ", "there"]))
    h.capability("cap-gen")
    sid = h.session("cap-gen") if with_session else None
    deltas: list[str] = []

    prediction = h.turns.predict(WS, "cap-gen", "hi", sid, sink=deltas.append)

    assert deltas == ["Hel", "lo ", "there"]
    assert prediction.output == "Hello there"
    assert h.provider.stream_calls == 1 and h.provider.complete_calls == 0
    if sid is not None:
        assert h.store.messages_of(sid)[-1].content == "Hello there"


@pytest.mark.parametrize("with_session", [True, False])
def test_given_a_filter_when_streaming_a_flagged_answer_then_only_withheld_text_reaches_the_sink(
    with_session: bool,
) -> None:
    h = build(provider=FakeProvider(FLAGGED_ANSWER, chunks=["here is the ", "forbidden recipe"]))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen") if with_session else None
    deltas: list[str] = []

    prediction = h.turns.predict(WS, "cap-gen", "hi", sid, sink=deltas.append)

    assert deltas == [WITHHELD]
    assert (prediction.output, prediction.withheld) == (WITHHELD, True)
    assert all("forbidden" not in delta for delta in deltas)
    assert h.provider.stream_calls == 0
    assert FLAGGED_ANSWER not in h.store.dump()


def test_given_a_filter_when_streaming_an_allowed_answer_then_the_sink_gets_the_final_text_once():
    h = build(provider=FakeProvider("all good here", chunks=["all ", "good ", "here"]))
    h.capability("cap-gen", **filtered())
    sid = h.session("cap-gen")
    deltas: list[str] = []

    prediction = h.turns.session_message(WS, sid, "hi", sink=deltas.append)

    assert deltas == ["all good here"]
    assert prediction.output == "all good here"
    assert h.provider.stream_calls == 0


# -- agents: runs and tool digests -------------------------------------------------

LOOKUP = ToolCall("lookup_order", {"order": "42"}, "order 42 shipped; ETA Tuesday")


def agent_harness(**replay: Any) -> Harness:
    h = build(provider=FakeProvider("Your order ships Tuesday", tool_calls=[LOOKUP]))
    h.capability(
        "cap-agent",
        kind="agent",
        tools=[ToolSpec(name="lookup_order").model_dump()],
        **replay,
    )
    return h


def test_given_an_agent_turn_with_tool_calls_when_recorded_then_digest_and_run_trace_are_kept():
    h = agent_harness()
    sid = h.session("cap-agent", principal=PRINCIPAL)

    prediction = h.turns.predict(WS, "cap-agent", "where is order 42?", sid)

    assert prediction.turn is not None
    assistant_seq = prediction.turn.assistant_seq
    digests = h.store.digests_of(sid)
    assert list(digests) == [assistant_seq]
    digest, expires_at = digests[assistant_seq]
    assert digest.tools == ["lookup_order"]
    assert digest.text == build_tool_digest([LOOKUP], 2_000)
    assert expires_at == int(h.clock.now + 3_600)
    # The run trace: who the tools acted for, and what they did.
    assert prediction.run_id is not None
    run = h.store.get_run(WS, prediction.run_id)
    assert run is not None
    assert run["sessionId"] == sid
    assert run["capabilityId"] == "cap-agent"
    assert run["principal"] == PRINCIPAL
    assert run["output"] == "Your order ships Tuesday"
    assert [(s["tool"], s["input"], s["output"], s["principal"]) for s in run["steps"]] == [
        ("lookup_order", {"order": "42"}, "order 42 shipped; ETA Tuesday", PRINCIPAL)
    ]
    assert h.store.run_id_of(sid, assistant_seq) == prediction.run_id
    assert h.store.get_run(OTHER_WS, prediction.run_id) is None


def test_given_a_digest_when_the_next_turn_replays_its_answer_then_the_digest_is_fenced_data():
    h = agent_harness()
    sid = h.session("cap-agent", principal=PRINCIPAL)
    h.turns.predict(WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()

    h.clock.advance(60)
    h.turns.predict(WS, "cap-agent", "and when does it arrive?", sid)

    prompt = h.provider.last_prompt
    assert fenced(prompt, "tool-results") == [build_tool_digest([LOOKUP], 2_000)]
    assert 'seq="2"' in prompt.system
    assert all(LOOKUP.output not in m.content for m in prompt.messages)


def test_given_a_digest_past_its_retention_when_the_next_turn_runs_then_it_is_not_replayed():
    h = agent_harness()
    sid = h.session("cap-agent")
    h.turns.predict(WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()

    h.clock.advance(3_600 + 1)
    h.turns.predict(WS, "cap-agent", "and when does it arrive?", sid)

    prompt = h.provider.last_prompt
    # The answer is still replayed, the expired digest (still stored: TTL is lazy) is not.
    assert ChatMessage("assistant", "Your order ships Tuesday") in prompt.messages
    assert 2 in h.store.digests_of(sid)
    assert fenced(prompt, "tool-results") == []
    assert LOOKUP.output not in prompt.system


def test_given_a_digest_whose_answer_left_the_window_when_the_next_turn_runs_then_not_replayed():
    h = agent_harness(**small_replay(max_messages=2))
    sid = h.session("cap-agent")
    h.turns.predict(WS, "cap-agent", "where is order 42?", sid)
    h.provider.tool_calls = ()
    h.turns.predict(WS, "cap-agent", "thanks", sid)
    assert len(fenced(h.provider.last_prompt, "tool-results")) == 1

    h.turns.predict(WS, "cap-agent", "anything else?", sid)

    assert fenced(h.provider.last_prompt, "tool-results") == []


# -- summary trigger ---------------------------------------------------------------


def test_given_the_window_starts_omitting_when_turns_arrive_then_one_summary_run_per_window():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")

    h.turns.predict(WS, "cap-gen", "turn one", sid)
    assert h.summary_queue.sent == []  # after this turn nothing is omitted yet

    h.clock.advance(1)
    h.turns.predict(WS, "cap-gen", "turn two", sid)  # messages 1-2 now fall out
    assert h.summary_queue.sent == [({"workspaceId": WS, "sessionId": sid}, 1)]

    h.clock.advance(5)
    h.turns.predict(WS, "cap-gen", "turn three", sid)  # within the coalescing window
    assert len(h.summary_queue.sent) == 1

    h.clock.advance(10)
    h.turns.predict(WS, "cap-gen", "turn four", sid)  # the window has passed
    assert len(h.summary_queue.sent) == 2


def test_given_a_summary_covering_the_omitted_messages_when_a_turn_arrives_then_none_is_requested():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")
    h.store.add_turn(sid, "q1", "a1")
    h.store.add_turn(sid, "q2", "a2")
    assert h.store.advance_summary(sid, 0, Summary(text="q1 and q2 were asked", through_seq=4))

    covered = h.turns.predict(WS, "cap-gen", "q3", sid)  # afterwards 1-4 are omitted
    assert h.summary_queue.sent == []
    assert covered.context is not None and covered.context.summary_included is True
    assert fenced(h.provider.last_prompt, "summary") == ["q1 and q2 were asked"]

    h.turns.predict(WS, "cap-gen", "q4", sid)  # afterwards 1-6 are omitted, 5-6 uncovered
    assert h.summary_queue.bodies == [{"workspaceId": WS, "sessionId": sid}]


def test_given_a_summary_is_due_when_the_transcript_write_fails_then_no_summary_is_requested():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")
    h.store.add_turn(sid, "q1", "a1")
    h.store.fail_next_append = StoreUnavailable("throttled")

    prediction = h.turns.predict(WS, "cap-gen", "q2", sid)  # would omit 1-2 once recorded

    assert prediction.recorded is False
    assert h.summary_queue.sent == []
    assert len(h.repair_queue.sent) == 1


def test_given_the_summary_queue_fails_when_a_summary_is_due_then_the_turn_still_succeeds():
    h = build()
    h.capability("cap-gen", **small_replay(max_messages=2))
    sid = h.session("cap-gen")
    h.store.add_turn(sid, "q1", "a1")
    h.summary_queue.fail_with = StoreUnavailable("SQS down")

    prediction = h.turns.predict(WS, "cap-gen", "q2", sid)

    assert prediction.recorded is True
    assert prediction.output == "the answer"
    assert h.summary_queue.attempts == 1
    assert h.metrics.counts["SummaryEnqueueFailed"] == 1
    assert len(h.store.messages_of(sid)) == 4


# -- the messages door -------------------------------------------------------------


def test_given_the_session_messages_door_when_conversing_then_it_records_exactly_like_predict():
    h = build(provider=FakeProvider(lambda p: f"echo {p.user_input} after {len(p.messages)}"))
    h.capability("cap-gen", **small_replay(max_messages=2))
    via_predict = h.session("cap-gen")
    via_messages = h.session("cap-gen")
    inputs = ["one", "two", "three"]

    predicted = [h.turns.predict(WS, "cap-gen", text, via_predict) for text in inputs]
    prompts_predict = h.provider.prompts[:]
    h.provider.prompts.clear()
    messaged = [h.turns.session_message(WS, via_messages, text) for text in inputs]

    assert chat(h, via_predict) == chat(h, via_messages)
    assert len(chat(h, via_messages)) == 6
    assert [p.messages for p in h.provider.prompts] == [p.messages for p in prompts_predict]
    for a, b in zip(predicted, messaged, strict=True):
        assert a.model_dump(exclude={"session_id"}) == b.model_dump(exclude={"session_id"})
        assert b.session_id == via_messages


def test_given_an_unknown_session_when_posting_a_message_then_it_is_not_found():
    h = build()
    h.capability("cap-gen")

    with pytest.raises(SessionNotFound):
        h.turns.session_message(WS, "ses_missing", "hello")
    assert h.provider.prompts == []
