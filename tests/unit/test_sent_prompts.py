"""What a turn was sent (SessionService.sent_prompt) over fakes: rebuilt from the turn's
prompt record and what is stored, it is exactly what the provider received; a digest
past its retention shows as expired; a fork's inherited turns show what the parent's
turns were sent."""

from __future__ import annotations

import pytest

from convo_memory.api import SessionCreate
from convo_memory.domain.errors import NotFound, SessionNotFound
from convo_memory.domain.models import Recall, Summary, ToolDigest, ToolSpec
from convo_memory.domain.prompt_record import ExpiredDigest, PromptRecord
from convo_memory.domain.tools import ToolCall
from tests.fakes.adapters import FakeProvider
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.prompts import rebuilt_prompt
from tests.support.turns import session_message

WINDOW = {"maxMessages": 4, "maxChars": 10_000, "minMessages": 1}


@pytest.fixture
def app() -> FakeApp:
    app = fake_app(
        provider=FakeProvider(lambda prompt: f"answer to {prompt.user_input}"),
        digest_retention_hours=1,
    )
    app.capability("cap-gen", replay=WINDOW, instructions="Be brief.")
    app.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup_order").model_dump()])
    return app


def open_session(app: FakeApp, cap: str = "cap-gen") -> str:
    body = SessionCreate(capability_id=cap, external_ref="end-user-1")
    return app.container.sessions.create(WS, body.new_session()).id


def say(app: FakeApp, session_id: str, text: str) -> int:
    prediction = session_message(app.container, WS, session_id, text)
    assert prediction.turn is not None
    return prediction.turn.assistant_seq


def nonce(app: FakeApp, session_id: str) -> str:
    return str(app.db.heads[session_id]["fenceNonce"])


def test_each_turn_was_sent_exactly_what_its_record_rebuilds(app: FakeApp) -> None:
    session_id = open_session(app)
    recall = Recall(text="they prefer email", from_sessions=["ses_older"])
    app.db.heads[session_id]["recall"] = recall.model_dump_json(by_alias=True)
    answers = []
    for i in range(1, 7):
        if i == 4:  # a summary appears (and is kept as a version)
            summary = Summary(text="folded 1-4", through_seq=4)
            assert app.db.stores.summaries.advance_summary(session_id, 0, summary)
        answers.append(say(app, session_id, f"message {i}"))

    for answer, received in zip(answers, app.provider.prompts, strict=True):
        sent = app.container.sessions.sent_prompt(WS, session_id, answer)
        rebuilt = rebuilt_prompt(sent, nonce(app, session_id))
        assert (rebuilt.system, rebuilt.messages) == (received.system, received.messages)
    last = app.container.sessions.sent_prompt(WS, session_id, answers[-1])
    assert (last.seq, last.instructions, last.recall, last.input) == (
        12,
        "Be brief.",
        recall,
        "message 6",
    )
    assert last.summary == Summary(text="folded 1-4", through_seq=4)
    assert [m.seq for m in last.messages] == [7, 8, 9, 10]


def test_a_turns_user_message_and_answer_name_the_same_record(app: FakeApp) -> None:
    session_id = open_session(app)
    say(app, session_id, "first")
    say(app, session_id, "second")

    by_answer = app.container.sessions.sent_prompt(WS, session_id, 4)
    by_question = app.container.sessions.sent_prompt(WS, session_id, 3)

    assert by_answer == by_question
    assert (by_answer.seq, by_answer.input, by_answer.summary) == (4, "second", None)
    assert [m.content for m in by_answer.messages] == ["first", "answer to first"]


def test_a_digest_past_its_retention_shows_as_expired(app: FakeApp) -> None:
    session_id = open_session(app, "cap-agent")
    app.provider.tool_calls = (ToolCall("lookup_order", {"q": "1"}, "ETA Friday"),)
    say(app, session_id, "where is my order?")
    app.provider.tool_calls = ()
    answer = say(app, session_id, "when again?")

    fresh = app.container.sessions.sent_prompt(WS, session_id, answer)
    app.clock.advance(2 * 3600)
    expired = app.container.sessions.sent_prompt(WS, session_id, answer)

    [digest] = fresh.tool_digests
    assert isinstance(digest, ToolDigest) and "ETA Friday" in digest.text
    assert expired.tool_digests == (ExpiredDigest(seq=2),)


def test_a_seq_the_session_does_not_have_or_a_turn_without_a_record_is_not_found(
    app: FakeApp,
) -> None:
    session_id = open_session(app)
    say(app, session_id, "hello")
    app.db.add_turn(session_id, "from before records", "an old answer")  # no record
    sessions = app.container.sessions

    for seq in (0, 5, 99):
        with pytest.raises(NotFound):
            sessions.sent_prompt(WS, session_id, seq)
    with pytest.raises(NotFound, match="recorded before"):
        sessions.sent_prompt(WS, session_id, 4)
    with pytest.raises(SessionNotFound):
        sessions.sent_prompt("ws_beta", session_id, 2)


def test_a_forks_inherited_turn_shows_what_the_parents_turn_was_sent(app: FakeApp) -> None:
    parent = open_session(app)
    for i in range(1, 5):
        say(app, parent, f"message {i}")
    before = app.container.sessions.sent_prompt(WS, parent, 4)
    fork = app.container.forks.fork(WS, parent, 8).id  # older turns not copied yet

    while_copying = app.container.sessions.sent_prompt(WS, fork, 4)
    app.container.sessions.delete(WS, parent)  # finishes the copy first

    assert while_copying == before
    assert app.container.sessions.sent_prompt(WS, fork, 4) == before


def test_a_record_is_a_few_bytes_whatever_the_seqs_and_never_over_two_hundred() -> None:
    typical = PromptRecord(first_seq=41, last_seq=60, summary_through=40)
    assert typical.encode(61) == "w20-1;s21"
    much_later = PromptRecord(first_seq=9_041, last_seq=9_060, summary_through=9_040)
    assert much_later.encode(9_061) == typical.encode(61)  # a turn's read does not grow
    last = 9_999_999_999
    widest = PromptRecord(
        first_seq=last - 200,
        last_seq=last - 1,
        summary_through=1,
        digest_seqs=tuple(range(last - 199, last, 2)),
        recall=True,
        app_tools=tuple(f"tool_{i:02d}_" + "x" * 56 for i in range(128)),
    )
    text = widest.encode(last)
    assert len(text.encode()) + len("p") <= 200
    decoded = PromptRecord.decode(text, last)
    assert decoded.app_tools == widest.app_tools[: len(decoded.app_tools)]
    assert decoded == PromptRecord(
        widest.first_seq,
        widest.last_seq,
        widest.summary_through,
        widest.digest_seqs,
        True,
        decoded.app_tools,
    )


@pytest.mark.parametrize(
    "record",
    [
        PromptRecord(),
        PromptRecord(1, 1),
        PromptRecord(3, 10, 2, (4, 8), True, ("get_weather", "book")),
        PromptRecord(2, 9, digest_seqs=(2, 6)),
    ],
)
def test_a_record_reads_back_as_it_was_written(record: PromptRecord) -> None:
    assert PromptRecord.decode(record.encode(11), 11) == record
