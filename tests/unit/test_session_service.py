"""Session use cases (SessionService) wired by the composition root over fakes: create,
read, patch, delete (marked first, emptied, the head removed by retention after the
grace period), transcript pages and the context view."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convo_memory.api import SessionCreate, SessionPatch
from convo_memory.domain.errors import (
    CapabilityNotConversational,
    CapabilityNotFound,
    ExternalRefImmutable,
    PrincipalImmutable,
    SessionNotFound,
    StoreUnavailable,
    ValidationFailed,
)
from convo_memory.domain.models import ReplayPolicy, Session, Summary, ToolSpec, parse_iso
from convo_memory.domain.prompt import ChatMessage
from convo_memory.domain.replay_window import select_replay_window
from convo_memory.domain.sessions import NewSession, SessionChanges
from convo_memory.domain.tools import ToolCall
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.turns import predict, session_message

OTHER_WS = "ws_beta"
PRINCIPAL = {"tenant_id": "t-1", "user_id": "u-7"}
LOOKUP = ToolCall("lookup_order", {"q": "1"}, "found it")


@pytest.fixture
def app() -> FakeApp:
    """The application with one generative capability, ``cap-gen``; digests kept 1 h."""
    app = fake_app(digest_retention_hours=1)
    app.capability("cap-gen")
    return app


def open_session(
    app: FakeApp,
    cap_id: str = "cap-gen",
    ws: str = WS,
    principal: dict[str, str] | None = PRINCIPAL,
    metadata: dict[str, Any] | None = None,
) -> Session:
    body = SessionCreate(
        capability_id=cap_id,
        external_ref="end-user-1",
        principal=principal,
        metadata=metadata or {},
    )
    return app.container.sessions.create(ws, body.new_session())


def agent_conversation(app: FakeApp) -> tuple[Session, str]:
    """An agent session with one turn that called a tool (a digest and a run trace) and
    a summary; returns the session and the run id."""
    app.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup_order").model_dump()])
    session = open_session(app, "cap-agent")
    app.provider.text, app.provider.tool_calls = "done", (LOOKUP,)
    prediction = predict(app.container, WS, "cap-agent", "look it up", session.id)
    assert prediction.recorded and prediction.run_id is not None
    summary = Summary(text="earlier", through_seq=2)
    assert app.db.stores.summaries.advance_summary(session.id, 0, summary)
    assert app.db.digests_of(session.id)
    return session, prediction.run_id


def deleted_at(app: FakeApp, session_id: str) -> datetime:
    """When the session's deletion began, as its head records it."""
    return datetime.fromtimestamp(parse_iso(app.db.heads[session_id]["deletedAt"]), UTC)


def grace(app: FakeApp) -> timedelta:
    return timedelta(seconds=app.container.settings.deletion_grace_seconds)


def patch(body: dict[str, Any]) -> SessionChanges:
    """A PATCH body's changes, as the handler parses them (camelCase JSON)."""
    return SessionPatch.model_validate(body).changes()


# -- create and read ---------------------------------------------------------------


def test_given_a_capability_of_the_workspace_when_creating_then_a_fresh_active_session_exists(
    app: FakeApp,
) -> None:
    session = open_session(app, metadata={"channel": "web"})

    stored = app.container.sessions.get(WS, session.id)
    assert stored == session
    assert (stored.status, stored.message_count) == ("active", 0)
    assert stored.capability_id == "cap-gen"
    assert stored.principal == PRINCIPAL
    assert stored.metadata == {"channel": "web"}
    assert stored.created_at == stored.last_active_at


def test_given_a_capability_of_another_workspace_when_creating_then_capability_not_found(
    app: FakeApp,
) -> None:
    app.capability("cap-theirs", ws=OTHER_WS)

    with pytest.raises(CapabilityNotFound):
        open_session(app, "cap-theirs", ws=WS)
    with pytest.raises(CapabilityNotFound):
        open_session(app, "cap-nowhere", ws=WS)

    assert app.db.heads == {}
    assert app.db.calls["create_session"] == 0


def test_given_a_classic_capability_when_creating_a_session_then_it_is_refused(
    app: FakeApp,
) -> None:
    app.capability("cap-classic", kind="classic")

    with pytest.raises(CapabilityNotConversational):
        open_session(app, "cap-classic")

    assert app.db.heads == {}
    assert app.db.calls["create_session"] == 0


def test_given_another_workspaces_session_when_reading_then_it_is_not_found(app: FakeApp) -> None:
    session = open_session(app)
    sessions = app.container.sessions

    with pytest.raises(SessionNotFound):
        sessions.get(OTHER_WS, session.id)
    with pytest.raises(SessionNotFound):
        sessions.get(WS, "ses_missing")
    with pytest.raises(SessionNotFound):
        sessions.context(OTHER_WS, session.id)
    with pytest.raises(SessionNotFound):
        sessions.messages(OTHER_WS, session.id, limit=10)
    with pytest.raises(SessionNotFound):
        sessions.patch(OTHER_WS, session.id, patch({"metadata": {"x": 1}}))
    with pytest.raises(SessionNotFound):
        sessions.delete(OTHER_WS, session.id)

    assert sessions.get(WS, session.id) == session
    assert app.db.heads[session.id]["status"] == "active"


# -- patch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "principal",
    [{"tenant_id": "t-1", "user_id": "someone-else"}, None, {}, {"tenant_id": "t-1"}],
)
def test_given_a_different_principal_when_patching_then_it_is_refused_and_nothing_changes(
    app: FakeApp, principal: dict[str, str] | None
) -> None:
    session = open_session(app, metadata={"keep": True})

    with pytest.raises(PrincipalImmutable):
        app.container.sessions.patch(
            WS, session.id, patch({"principal": principal, "metadata": {"x": 1}})
        )

    assert app.container.sessions.get(WS, session.id) == session
    assert app.db.calls["update_metadata"] == 0


def test_given_a_session_without_principal_when_patching_one_in_then_it_is_refused(
    app: FakeApp,
) -> None:
    session = open_session(app, principal=None)

    with pytest.raises(PrincipalImmutable):
        app.container.sessions.patch(WS, session.id, patch({"principal": {"user_id": "u-1"}}))

    assert app.container.sessions.get(WS, session.id).principal is None


def test_given_the_same_principal_when_patching_then_the_metadata_change_is_allowed(
    app: FakeApp,
) -> None:
    session = open_session(app, metadata={"a": 1})

    updated = app.container.sessions.patch(
        WS, session.id, patch({"principal": dict(PRINCIPAL), "metadata": {"b": 2}})
    )

    assert updated.principal == PRINCIPAL
    assert updated.metadata == {"b": 2}
    assert app.container.sessions.get(WS, session.id).metadata == {"b": 2}


def test_given_a_different_external_ref_when_patching_then_it_is_refused_and_nothing_changes(
    app: FakeApp,
) -> None:
    session = open_session(app, metadata={"keep": True})

    with pytest.raises(ExternalRefImmutable):
        app.container.sessions.patch(
            WS, session.id, patch({"externalRef": "someone-else", "metadata": {"x": 1}})
        )

    assert app.container.sessions.get(WS, session.id) == session
    assert app.db.calls["update_metadata"] == 0


def test_given_the_same_external_ref_when_patching_then_it_is_allowed(app: FakeApp) -> None:
    session = open_session(app)

    updated = app.container.sessions.patch(
        WS, session.id, patch({"externalRef": "end-user-1", "metadata": {"n": 1}})
    )

    assert updated.external_ref == "end-user-1"
    assert updated.metadata == {"n": 1}


def test_given_new_metadata_when_patching_then_it_replaces_the_old_as_a_whole(
    app: FakeApp,
) -> None:
    session = open_session(app, metadata={"a": 1, "nested": {"x": 1, "y": 2}})

    updated = app.container.sessions.patch(
        WS, session.id, patch({"metadata": {"nested": {"x": 9}}})
    )

    assert updated.metadata == {"nested": {"x": 9}}
    stored = app.container.sessions.get(WS, session.id)
    assert stored.metadata == {"nested": {"x": 9}}
    assert stored.model_dump(exclude={"metadata"}) == session.model_dump(exclude={"metadata"})


# -- delete ------------------------------------------------------------------------


def test_given_a_conversation_when_deleting_then_the_transcript_goes_and_run_traces_stay(
    app: FakeApp,
) -> None:
    session, run_id = agent_conversation(app)

    app.container.sessions.delete(WS, session.id)

    with pytest.raises(SessionNotFound):
        app.container.sessions.get(WS, session.id)
    with pytest.raises(SessionNotFound):
        app.container.sessions.messages(WS, session.id, limit=10)
    assert app.db.messages_of(session.id) == []
    assert app.db.digests_of(session.id) == {}
    assert app.db.stores.summaries.get_summary(session.id) is None
    assert app.db.stores.turns.list_messages(session.id, 0, 10) == ([], False)
    assert session.id not in app.db.summaries
    # What is left is the emptied head, marked deleted, for the retention run to remove.
    assert app.db.heads[session.id]["status"] == "deleting"
    # The agent run trace outlives the conversation.
    run = app.db.stores.runs.get_run(WS, run_id)
    assert run is not None and run["sessionId"] == session.id


def test_given_a_deleted_session_when_the_grace_period_passes_then_retention_removes_the_head(
    app: FakeApp,
) -> None:
    session, run_id = agent_conversation(app)
    app.container.sessions.delete(WS, session.id)
    began = deleted_at(app, session.id)

    # Within the grace period a turn that was already in flight may still land: the
    # head stays, so such a write is swept with it.
    early = app.container.retention.run(began + grace(app))
    assert early.deletions_finished == 0
    assert app.db.holds_session(session.id)

    report = app.container.retention.run(began + grace(app) + timedelta(milliseconds=1))

    assert report.deletions_finished == 1
    assert not app.db.holds_session(session.id)
    assert app.metrics.counts["DeletionsFinished"] == 1
    with pytest.raises(SessionNotFound):
        app.container.sessions.delete(WS, session.id)
    assert app.db.stores.runs.get_run(WS, run_id) is not None


def test_given_a_deletion_interrupted_after_marking_when_retried_then_it_resumes_and_finishes(
    app: FakeApp,
) -> None:
    session, _ = agent_conversation(app)
    app.db.fail_next["delete_contents"] = StoreUnavailable("throttled")

    with pytest.raises(StoreUnavailable):
        app.container.sessions.delete(WS, session.id)

    # Marked first: the session answers 404 at once, to reads and to turns alike,
    # though its transcript is still stored.
    with pytest.raises(SessionNotFound):
        app.container.sessions.get(WS, session.id)
    with pytest.raises(SessionNotFound):
        session_message(app.container, WS, session.id, "still there?")
    assert len(app.db.messages_of(session.id)) == 2

    app.container.sessions.delete(WS, session.id)  # the client's retry resumes

    assert app.db.messages_of(session.id) == []
    assert app.db.digests_of(session.id) == {}
    assert session.id not in app.db.summaries
    assert app.db.calls["begin_deletion"] == 2


def test_given_a_deletion_interrupted_and_never_retried_then_retention_finishes_it(
    app: FakeApp,
) -> None:
    session, run_id = agent_conversation(app)
    app.db.fail_next["delete_contents"] = StoreUnavailable("throttled")
    with pytest.raises(StoreUnavailable):
        app.container.sessions.delete(WS, session.id)
    assert len(app.db.messages_of(session.id)) == 2

    report = app.container.retention.run(
        deleted_at(app, session.id) + grace(app) + timedelta(seconds=1)
    )

    assert report.deletions_finished == 1
    assert not app.db.holds_session(session.id)
    assert app.db.stores.runs.get_run(WS, run_id) is not None


# -- transcript pages ----------------------------------------------------------------


def test_given_five_messages_when_paging_by_two_then_the_cursor_walks_oldest_first(
    app: FakeApp,
) -> None:
    session = open_session(app)
    app.db.add_turn(session.id, "q1", "a1")
    app.db.add_turn(session.id, "q2", "a2")
    app.db.add_turn(session.id, "q3", "a3")  # seqs 1..6
    sessions = app.container.sessions

    pages: list[list[int]] = []
    position = None
    while True:
        page, position = sessions.messages(WS, session.id, limit=4, after=position)
        pages.append([m.seq for m in page])
        if position is None:
            break

    assert pages == [[1, 2, 3, 4], [5, 6]]

    first, position = sessions.messages(WS, session.id, limit=2)
    assert ([m.content for m in first], position) == (["q1", "a1"], {"after": 2})
    second, position = sessions.messages(WS, session.id, limit=2, after=position)
    assert ([m.content for m in second], position) == (["q2", "a2"], {"after": 4})
    last, position = sessions.messages(WS, session.id, limit=2, after=position)
    assert ([m.content for m in last], position) == (["q3", "a3"], None)


@pytest.mark.parametrize("position", [{"after": "2"}, {"after": -1}, {"after": True}, {}])
def test_given_a_position_this_service_never_issues_when_paging_then_422(
    app: FakeApp, position: dict[str, object]
) -> None:
    session = open_session(app)

    with pytest.raises(ValidationFailed):
        app.container.sessions.messages(WS, session.id, limit=2, after=position)


def test_given_seven_sessions_when_finding_by_three_then_the_pages_walk_the_listing(
    app: FakeApp,
) -> None:
    sessions = app.container.sessions
    created = {open_session(app).id for _ in range(7)}
    sessions.create(WS, NewSession(capability_id="cap-gen", external_ref="someone-else"))

    pages: list[list[str]] = []
    position = None
    while True:
        page, position = sessions.find(WS, "end-user-1", 3, position)
        pages.append([s.id for s in page])
        if position is None:
            break

    everything, _ = sessions.find(WS, "end-user-1", 100)
    assert [sid for page in pages for sid in page] == [s.id for s in everything]
    assert set(s.id for s in everything) == created
    assert [len(page) for page in pages] == [3, 3, 1]


def test_given_no_messages_when_paging_then_an_empty_last_page(app: FakeApp) -> None:
    session = open_session(app)

    assert app.container.sessions.messages(WS, session.id, limit=50) == ([], None)


# -- context -----------------------------------------------------------------------


def test_given_a_history_and_a_summary_when_reading_context_then_it_is_the_replay_window(
    app: FakeApp,
) -> None:
    app.capability("cap-small", replay={"maxMessages": 4, "maxChars": 30, "minMessages": 1})
    session = open_session(app, "cap-small")
    for i in range(1, 5):
        app.db.add_turn(session.id, f"question {i}", f"answer {i}")
    summary = Summary(text="so far: 1-4", through_seq=4)
    assert app.db.stores.summaries.advance_summary(session.id, 0, summary)
    history = app.db.messages_of(session.id)
    app.settle()

    context = app.container.sessions.context(WS, session.id)

    window = select_replay_window(
        history, ReplayPolicy(max_messages=4, max_chars=30, min_messages=1)
    )
    assert context.messages == window.messages
    assert [m.seq for m in context.messages] == [6, 7, 8]  # 8 + 10 + 8 chars <= 30
    assert context.omitted_messages == window.omitted_messages == 5
    assert context.replayed_chars == window.replayed_chars
    assert context.summary == Summary(text="so far: 1-4", through_seq=4)
    assert context.tool_digests == ()
    assert app.db.writes() == 0


def test_given_a_context_when_the_next_turn_runs_then_the_model_sees_exactly_those_messages(
    app: FakeApp,
) -> None:
    app.capability("cap-small", replay={"maxMessages": 3, "maxChars": 1_000, "minMessages": 1})
    session = open_session(app, "cap-small")
    for i in range(1, 4):
        app.db.add_turn(session.id, f"question {i}", f"answer {i}")

    context = app.container.sessions.context(WS, session.id)
    predict(app.container, WS, "cap-small", "next", session.id)

    assert app.provider.last_prompt.messages[:-1] == tuple(
        ChatMessage(m.role, m.content) for m in context.messages
    )


def test_given_an_agent_session_when_reading_context_then_only_live_replayed_digests_show(
    app: FakeApp,
) -> None:
    # Digests are kept one hour: the first turn's has expired by the time of the second.
    app.capability("cap-agent", kind="agent", tools=[ToolSpec(name="lookup_order").model_dump()])
    session = open_session(app, "cap-agent")
    app.provider.text = "first"
    app.provider.tool_calls = (ToolCall("lookup_order", {"q": "old"}, "stale result"),)
    predict(app.container, WS, "cap-agent", "look it up", session.id)
    app.clock.advance(3_600 + 600)
    app.provider.text = "second"
    app.provider.tool_calls = (ToolCall("lookup_order", {"q": "new"}, "fresh result"),)
    predict(app.container, WS, "cap-agent", "again", session.id)

    context = app.container.sessions.context(WS, session.id)

    assert sorted(app.db.digests_of(session.id)) == [2, 4]  # both still stored
    assert [d.seq for d in context.tool_digests] == [4]
    assert context.tool_digests[0] == app.db.digests_of(session.id)[4][0]
    assert "fresh result" in context.tool_digests[0].text
    assert [m.seq for m in context.messages] == [1, 2, 3, 4]


def test_given_a_session_when_reading_it_then_the_count_and_last_turn_are_exact(
    app: FakeApp,
) -> None:
    # The head's own lastActiveAt is a coarse mark; reads report the real last turn.
    session = open_session(app)
    app.db.add_turn(session.id, "q1", "a1", created_at="2099-01-01T00:00:00.000Z")
    app.db.add_turn(session.id, "q2", "a2", created_at="2099-01-02T00:00:00.000Z")
    app.settle()

    stored = app.container.sessions.get(WS, session.id)

    assert (stored.message_count, stored.last_active_at) == (4, "2099-01-02T00:00:00.000Z")
    assert app.db.heads[session.id]["lastActiveAt"] == session.last_active_at
    assert app.db.calls == Counter({"get_session": 1})
